"""What a run writes and shows: metrics, the console, and reports."""
