"""OpenCV, the peer the detection benchmarks run beside facerun, imported quietly."""

from __future__ import annotations


def import_cv2():
    """cv2 with its own log turned down to errors (ImportError when OpenCV is not installed): its DNN module prints
    `[ WARN:0@0.012] ... setPreferableTarget Targets are not supported by the new graph engine` on stderr for every
    FaceDetectorYN it makes, lines that would land in the middle of facerun's output and mean nothing to its user."""
    import cv2

    logging = getattr(getattr(cv2, "utils", None), "logging", None)
    if logging is not None:  # cv2.utils.logging is in every OpenCV 4 and 5 build; an odd build just stays talkative
        logging.setLogLevel(logging.LOG_LEVEL_ERROR)
    return cv2
