"""fairque command line (composition root)."""
