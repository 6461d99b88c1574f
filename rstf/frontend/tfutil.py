"""Import TensorFlow once, quietly.

TensorFlow's C++ runtime prints banners while it loads (the oneDNN notice, absl's
"before InitializeLog" warning) that no log-level variable silences in 2.21; they would bury
rstf's own one-line messages. The import runs with file descriptor 2 pointed at a temporary
file, which is replayed only if the import fails.
"""
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _quiet_import():
    if os.environ.get("RSTF_DEBUG"):
        import tensorflow

        return tensorflow
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import tensorflow
        except BaseException:
            os.dup2(saved, 2)
            capture.seek(0)
            sys.stderr.write(capture.read().decode("utf-8", "replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    return tensorflow


tf = _quiet_import()
if not os.environ.get("RSTF_DEBUG"):
    # TF's Python deprecation notices (the v1 SavedModel builder API, say) are not the
    # user's concern; errors still surface as exceptions.
    tf.get_logger().setLevel("ERROR")

__all__ = ["tf"]
