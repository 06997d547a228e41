"""The analytic CUTLASS kernel ranking (predictor.runtime.choices.cutlass) on stand-in ChoiceCallers."""

from types import SimpleNamespace

from predictor.core.candidate import Candidate
from predictor.runtime.choices.cutlass import prune_cutlass, tile_score


def caller(name, tile=None, swizzle=1, size=(4096, 4096)):
    desc = "" if tile is None else (f"cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_{tile}_1x1x1_0_tnn_align8_"
                                    f"warpspecialized_epi_nosmem swizzle={swizzle}")
    return SimpleNamespace(name=name, description=desc, layout=SimpleNamespace(size=list(size)))


def test_tile_score_prefers_tiles_that_fill_the_waves():
    big, small = Candidate("cutlass", 256, 128, 64), Candidate("cutlass", 64, 64, 64)
    # 4096x4096 on 132 SMs: 256x128 tiles make 512 tiles = 3.9 waves; both fill well, the big tile is closer to
    # the work per SM
    assert tile_score(4096, 4096, big, 132) > tile_score(4096, 4096, small, 132)
    # 128x128 output: one 256x128 tile is half padding, one 64x64 wave of 4 tiles is not
    assert tile_score(128, 128, small, 132) > tile_score(128, 128, big, 132)


def test_prune_keeps_whole_kernels_and_everything_else():
    choices = [caller("mm"), caller("cutlass_a", "64x64x64", 1), caller("cutlass_a", "64x64x64", 2),
               caller("cutlass_b", "256x128x64", 1), caller("cutlass_b", "256x128x64", 2), caller("cutlass_x")]
    kept = prune_cutlass(choices, 1, 132)
    assert [c.name for c in kept] == ["mm", "cutlass_b", "cutlass_b", "cutlass_x"]  # unparseable kept
    assert prune_cutlass(choices, 2, 132) == choices
    small = [caller("mm", size=(128, 128)), caller("cutlass_a", "64x64x64", size=(128, 128)),
             caller("cutlass_b", "256x128x64", size=(128, 128))]
    assert [c.name for c in prune_cutlass(small, 1, 132)] == ["mm", "cutlass_a"]  # small output: small tile
    symbolic = [SimpleNamespace(name=c.name, description=c.description, layout=SimpleNamespace(size=["s0", 4096]))
                for c in choices]
    assert prune_cutlass(symbolic, 1, 132) == symbolic  # unknown output size: nothing dropped
