"""In-program labels: each GEMM decision of ``predictor.compile`` timed inside its whole program's step.

``collect`` (``python -m collectors.in_program.collect``) times both sides of every decision in the step;
``agreement`` turns those records into the policy's agreement figure; ``redecide`` replays the recorded decisions
under another model or gap; ``context_blocks`` builds the sampled MLP programs and ``context_dataset`` turns their
records into training rows. The programs themselves come from the model zoo (``benchmarks/zoo/models.py``).
"""
