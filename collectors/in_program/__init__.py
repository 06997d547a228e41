"""In-program labels: each GEMM decision of ``predictor.compile`` timed inside its whole program's step.

``collect`` (``python -m collectors.in_program.collect``) times both sides of every decision in the step;
``agreement`` turns those records into the policy's agreement figure; ``redecide`` replays the recorded decisions
under another model or gap; ``context_blocks`` builds the sampled MLP programs and ``context_dataset`` turns their
records into training rows. The programs themselves are the zoo's models (``collectors/programs/models.py``).

How ``collect --paired`` times a decision: ``predictor.compile`` runs once while the hook records every GEMM decision
and its runner-up as Inductor lookup-table entries; the step is then compiled with torch alone serving that table,
and once more per GEMM with its entry flipped, all in one process, and their CUDA graphs are replayed in turns. A
flip's effect is the median over rounds of its ratio to the base's same round; a flip whose ratios spread more than
2% (IQR) is reported but not counted, since separate processes differ by 1-6% on a shared host.
"""
