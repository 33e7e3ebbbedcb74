"""aoscale package."""

DEFAULT_BOOTSTRAP = 1000  # resamples behind every 95 % interval, in scaling.launch and fit_curves alike
