"""The Monitor page: a run followed live, with its chart tabs."""
