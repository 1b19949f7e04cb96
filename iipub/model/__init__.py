"""The job model, pure: the 18 states and their transitions, the job and journal values, track
views, ownership."""
