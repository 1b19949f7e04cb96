"""What one run of the machine shares among its steps and threads: the run context a sweep or a
webhook delivery builds, and its pieces (deadline, counters, cool-downs, the ledger's view and
records, the poll cadence, write batches, and what only creates use)."""
