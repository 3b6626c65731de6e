"""What a run or a comparison says about itself: scores, plots, warnings, data and fit reports."""
