"""Everything that runs inside a user's rank. Imports torch lazily."""
