"""Reading ONNX files and compiling them into step programs."""
