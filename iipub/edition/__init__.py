"""An edition as a value, pure: the checks on the model's output and its composition into
artifacts."""
