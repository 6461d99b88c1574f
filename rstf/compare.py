"""`rstf.compare(model, out_dir_or_result, ...)`: the public API function, as a module.

`import rstf` imports lazily, and once a submodule named `compare` is imported it shadows
the package attribute of that name, so the public function has to be this module itself,
made callable: calling it runs `rstf.evaluation.compare.compare_model`, as
`rstf.api.compare` does (that docstring says what it returns). The comparison itself, and
`rstf compare`, live in rstf/evaluation/compare.py.
"""
import sys
import types


class _CallableModule(types.ModuleType):
    """This module is also the API function: `rstf.compare(model, out_dir_or_result, ...)`."""

    def __call__(self, *args, **kwargs):
        from .evaluation.compare import compare_model

        return compare_model(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
