"""Building blocks every concept uses: typed errors, times, words, strict settings sections, atomic
files, TLS, logs, back-off."""
