"""nsysan's version, in a module that imports nothing: every layer may name it without importing the
package root (which imports the analysis)."""

__version__ = "0.1.0"
