"""The face jobs: detection, alignment, embedding, evaluation, drawing, image loading."""
