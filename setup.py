"""Build and install pyrope: the cffi extension is built from csrc/."""
from setuptools import setup

setup(
    cffi_modules=["pyrope/_build.py:ffibuilder"],
)
