"""dlrmsim: a discrete-event performance simulator of clusters that train and serve DLRM models."""

__version__ = "0.1.0"
