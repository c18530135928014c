"""Operations built from ropes, with the Rope class an argument (so they import no
``pyrope.rope``): explicit-frequency twins, and the re-rotation and conversion of
cached keys behind ``pyrope.cache``."""
