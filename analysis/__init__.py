"""aoscale package."""

MIN_BOOTSTRAP = 10  # fewer resamples cannot place a 95 % interval
DEFAULT_BOOTSTRAP = 1000  # resamples behind every 95 % interval, in scaling.launch and fit_curves alike
