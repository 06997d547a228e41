"""The vocabulary the runtime and the offline side share: a GEMM problem, a candidate kernel, the GPU, the
features a ranker reads, the regions of problem space. No module here imports anything else of the package."""
