"""Build and install pyrope: the cffi extension is built from csrc/, and so is
libpyrope, the C library the package ships for C and C++ programs."""
import functools
import importlib.util
import os

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


@functools.lru_cache(maxsize=None)
def _builder():
    # pyrope/_build.py by path: importing the package would need the extension it builds
    spec = importlib.util.spec_from_file_location("_pyrope_build", os.path.join(ROOT, "pyrope", "_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class build_ext_with_library(build_ext):
    """The C core's objects compiled once, then build_ext linking them into the
    extension, then libpyrope from the same objects, its header and pkg-config
    file into the built package; with --inplace (and in editable installs) copied into the source
    tree too, as setuptools does with the extension."""

    def run(self):
        _builder().require(_builder().missing_python_headers())   # one line, not a compile error
        # the C core compiled once, in parallel, for the extension and libpyrope alike
        objects = _builder().compile_objects(os.path.join(self.build_temp, "csrc"))
        for ext in self.extensions:
            if ext.name == _builder().MODULE:
                _builder().link_shared_objects(ext, objects)
        super().run()
        build_pkg = os.path.join(self.build_lib, "pyrope")
        self.announce("linking libpyrope", level=2)
        _builder().build_library(build_pkg, objects)
        if self.inplace:
            for built, source in self._library_mapping():
                self.mkpath(os.path.dirname(source))
                self.copy_file(built, source, level=self.verbose)
            # an older in-place build under another suffix would be imported instead
            for ext in self.extensions:
                for path in _builder().remove_shadowing_builds(self.get_ext_fullpath(ext.name)):
                    self.announce(f"removed {path}: it would shadow the extension just built", level=2)

    def _library_mapping(self):
        source_pkg = self.get_finalized_command("build_py").get_package_dir("pyrope")
        return [(os.path.join(self.build_lib, "pyrope", p), os.path.join(source_pkg, p))
                for p in _builder().library_outputs()]

    def get_outputs(self):
        outputs = super().get_outputs()
        if not self.inplace:  # in place, super() lists the mapping's keys, ours included
            outputs += [built for built, _ in self._library_mapping()]
        return sorted(outputs)

    def _get_output_mapping(self):
        yield from super()._get_output_mapping()
        if self.inplace:
            yield from self._library_mapping()


setup(
    cffi_modules=["pyrope/_build.py:ffibuilder"],
    cmdclass={"build_ext": build_ext_with_library},
)
