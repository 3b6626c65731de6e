"""Training on long texts read as windows (`attnserve-train --long-texts windows`)."""
