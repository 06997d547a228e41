"""Candidate keys and the two mappings from Inductor objects, including CUTLASS choices (names as Inductor 2.11
printed them on the H200, docs/CUTLASS.md)."""

import zipfile

import pytest

from collectors.cutlass_env import prepare_cutlass_root
from predictor.core.candidate import Candidate, from_choice_caller, from_template_kwargs, parse_key, to_template_kwargs

TRITON_DESC = ("ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=64, BLOCK_M=128, BLOCK_N=128, EVEN_K=True, "
               "GROUP_M=8, USE_FAST_ACCUM=False, num_stages=5, num_warps=8")
CUTLASS_DESC = ("cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_128x128x64_1x1x1_0_tnn_align2_cpasync_"
                "warpspecialized_epi_nosmem swizzle=4")


def test_choice_callers_map_to_candidates():
    assert from_choice_caller("triton_mm_18", TRITON_DESC).key == "triton_mm/128x128x64/s5/w8/g8"
    assert from_choice_caller("triton_mm_persistent_tma_3", TRITON_DESC).family == "triton_tma"
    assert from_choice_caller("mm", "").key == "aten/mm"
    assert from_choice_caller("decompose_k_mm_8_split", "").key == "decompose_k/k8"
    cutlass = from_choice_caller("cutlass_d96d8686", CUTLASS_DESC)
    assert cutlass == Candidate("cutlass", 128, 128, 64, 0, 0, 4,
                                aten_op="c1x1x1_tnn_align2_cpasync_warpspecialized_epi_nosmem")
    assert cutlass.key == "cutlass/128x128x64/s0/c1x1x1_tnn_align2_cpasync_warpspecialized_epi_nosmem/sw4"
    assert not cutlass.is_triton
    # the same kernel with another swizzle is another candidate (Inductor times each)
    assert from_choice_caller("cutlass_d96d8686", CUTLASS_DESC.replace("swizzle=4", "swizzle=8")).key != cutlass.key
    with pytest.raises(ValueError, match="CUTLASS"):
        from_choice_caller("cutlass_123", "no kernel name here")


def test_keys_round_trip_for_every_family():
    for c in (Candidate("triton_mm", 64, 32, 128, 5, 4, 8), Candidate("triton_tma", 128, 128, 64, 3, 8, 8),
              Candidate("decompose_k", k_split=16), Candidate("aten", aten_op="bias_addmm"),
              from_choice_caller("cutlass_1", CUTLASS_DESC)):
        assert parse_key(c.key) == c
    with pytest.raises(ValueError, match="not a candidate key"):
        parse_key("cutlass/128x128/whatever")
    with pytest.raises(ValueError, match="unknown candidate family"):
        Candidate("cublaslt")


def test_template_kwargs_map_to_candidates():
    kw = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "num_stages": 3, "num_warps": 4, "GROUP_M": 8}
    assert from_template_kwargs("triton::mm", kw).key == "triton_mm/64x128x32/s3/w4/g8"
    assert from_template_kwargs("aten::_int_mm", {}).key == "aten/_int_mm"
    with pytest.raises(ValueError, match="unknown Inductor template"):
        from_template_kwargs("cutlass::gemm", kw)
    for c in (Candidate("triton_mm", 64, 128, 32, 3, 4, 8), Candidate("triton_tma", 128, 128, 64, 3, 8, 8),
              Candidate("decompose_k", k_split=4), Candidate("aten", aten_op="mm")):
        assert from_template_kwargs(*to_template_kwargs(c)) == c  # the two mappings are inverses
    with pytest.raises(ValueError, match="no Inductor template"):
        to_template_kwargs(from_choice_caller("cutlass_1", CUTLASS_DESC))


def test_cutlass_root_is_built_from_the_wheel_layout(tmp_path, monkeypatch):
    wheel = tmp_path / "nvidia_cutlass-4.2.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in ("cutlass_library/__init__.py", "cutlass_library/source/include/cutlass/cutlass.h",
                     "cutlass_library/source/tools/util/include/x.h", "cutlass_cppgen/__init__.py", "pycute/__init__.py"):
            z.writestr(name, "")
    monkeypatch.setenv("TORCHINDUCTOR_CUTLASS_DIR", "unset")  # restored after the test
    root = prepare_cutlass_root(wheel, tmp_path / "work")
    assert (root / "python" / "cutlass_library" / "__init__.py").is_file()
    assert (root / "python" / "pycute").is_dir() and (root / "include" / "cutlass" / "cutlass.h").is_file()
    assert (root / "tools" / "util" / "include" / "x.h").is_file()
    import os

    assert os.environ["TORCHINDUCTOR_CUTLASS_DIR"] == str(root)
    assert prepare_cutlass_root(wheel, tmp_path / "work") == root  # idempotent
    with pytest.raises(FileNotFoundError, match="not a wheel"):
        prepare_cutlass_root(tmp_path / "missing.whl")
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("other/__init__.py", "")
    with pytest.raises(ValueError, match="nvidia-cutlass"):
        prepare_cutlass_root(empty, tmp_path / "work2")


def test_cutlass_root_lives_in_a_private_folder(tmp_path, monkeypatch):
    """Inductor imports Python code from the root: never from a fixed shared /tmp path another user could make."""
    import os
    import stat

    from collectors.cutlass_env import default_workdir

    wheel = tmp_path / "nvidia_cutlass-4.2.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in ("cutlass_library/__init__.py", "cutlass_library/source/include/cutlass/cutlass.h"):
            z.writestr(name, "")
    monkeypatch.setenv("TORCHINDUCTOR_CUTLASS_DIR", "unset")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = prepare_cutlass_root(wheel)
    work = default_workdir(wheel)
    assert root.parent == work and str(work).startswith(str(tmp_path / "cache")) and "/tmp/gemm_predictor" not in str(root)
    assert stat.S_IMODE(work.stat().st_mode) == 0o700 and work.stat().st_uid == os.getuid()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # as if another user had created it first
    with pytest.raises(RuntimeError, match="not a private folder of this user"):
        prepare_cutlass_root(wheel, shared)
    (tmp_path / "link").symlink_to(work)
    with pytest.raises(RuntimeError, match="not a private folder"):
        prepare_cutlass_root(wheel, tmp_path / "link")
    assert not any(p.name.startswith(".wheel-") for p in work.iterdir())  # no staging leftovers


def test_candidates_from_choices_match_from_template_kwargs_and_are_shared():
    """The hook's memoised mapping gives what from_template_kwargs gives, the same objects on a second list, and
    still refuses an unknown template; cached keys leave equality and hashing to the fields."""
    from types import SimpleNamespace

    from predictor.core.candidate import candidates_from_choices, from_template_kwargs, to_template_kwargs

    def choice(uid, kw):
        return SimpleNamespace(template=SimpleNamespace(uid=uid), params=SimpleNamespace(to_kwargs=lambda: dict(kw)))

    made = [Candidate("triton_mm", 64, 128, 32, 3, 4, 8), Candidate("triton_tma", 128, 128, 64, 4, 8, 8),
            Candidate("decompose_k", k_split=32), Candidate("aten", aten_op="mm")]
    specs = [to_template_kwargs(c, hint=64 if i == 0 else None) for i, c in enumerate(made)]
    specs.append(("triton::mm", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "num_stages": 2, "num_warps": 2,
                                 "epilogue": [1, 2]}))  # no GROUP_M: 8
    cands, hints = candidates_from_choices([choice(uid, kw) for uid, kw in specs])
    assert cands == [from_template_kwargs(uid, kw) for uid, kw in specs] and hints == [64, None, None, None, None]
    again, _ = candidates_from_choices([choice(uid, kw) for uid, kw in specs])
    assert all(a is b for a, b in zip(again, cands))
    assert cands[0].key == "triton_mm/64x128x32/s3/w4/g8" and cands[0] == Candidate("triton_mm", 64, 128, 32, 3, 4, 8)
    assert hash(cands[0]) == hash(Candidate("triton_mm", 64, 128, 32, 3, 4, 8))
    assert cands[0].numbers == (64, 128, 32, 3, 4, 8, 0)
    with pytest.raises(ValueError, match="unknown Inductor template"):
        candidates_from_choices([choice("triton::nope", {"BLOCK_M": 1})])
