"""dpcli audit: empirical lower bounds on the privacy loss of a spec's mechanisms."""
