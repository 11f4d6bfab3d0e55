"""sitecustomize written by `gpumem record` for launchers: every Python
process the launcher starts with a RANK records its own snapshot
(gpumem_hooks._launcher_start), then the sitecustomize this one shadows,
if any, runs as usual."""
import os
import sys


def _gpumem_record():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import gpumem_hooks

        gpumem_hooks._launcher_start()
    except Exception as e:  # recording must never stop training
        print(f"gpumem: could not record this process: {e}", file=sys.stderr)
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)


_gpumem_record()
