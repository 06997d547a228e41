"""GPU collection: shape corpus, bulk Triton timing, the Inductor-faithful collector (never imported by predictor/)."""
