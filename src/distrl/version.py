"""The one place for distrl's version (``distrl.__version__``, the wheel's metadata, what
``distrl --version`` prints and what ranks compare at setup): a leaf module, so code below the
package root reads it without importing the root."""

__version__ = "0.1.0"
