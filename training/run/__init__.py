"""One run end to end and the self-describing run directory it writes."""
