"""How long a run will take: its parts from measured rates (predict, rates), the error
learned from past runs (error), the words the pages show (text) and the time left of a
running job (remaining)."""
