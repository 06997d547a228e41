"""What lives in files: a model folder (save / load / verify, never a pickle), the strict LightGBM text parser,
the compiled tree walker and its C source, atomic writes, the dataset schema."""
