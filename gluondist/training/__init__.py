"""fit's loop and everything it calls in the training process."""
