"""The shared studio's rules: who may sign in (tokens, guesses, clients), from which
host and page (hosts), and what a session may launch, cancel or delete (rules, datasets)."""
