"""sitecustomize written by `gpumem estimate`: the Python process it starts
emulates CUDA on gpumem's virtual card (gpumem_estimate.install), then the
sitecustomize this one shadows, if any, runs as usual."""
import os
import sys


def _gpumem_estimate():
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("GPUMEM_ESTIMATE_FDS"):
        try:
            import gpumem_estimate

            gpumem_estimate.install()
        except BaseException as e:  # never run the script on a real GPU instead
            print(f"gpumem: error: the CUDA emulator could not start: {type(e).__name__}: {e}", file=sys.stderr)
            os._exit(3)
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)


_gpumem_estimate()
