"""The Train page: its data choice, settings, advice, notes and cost."""
