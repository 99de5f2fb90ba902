"""The CPU facts read at run time (mhfast.runtime.cpu_info) and the CPU sub-batch size derived from them."""
from __future__ import annotations

import pytest
import torch

from mhfast.runtime import cpu_info, precision, runner


def _sysfs(root, caches):
    """A fake /sys/devices/system/cpu/cpu0/cache: one index<i> folder per (level, type, size)."""
    for i, (level, kind, size) in enumerate(caches):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


@pytest.mark.parametrize("text, expected", [("1024K", 1 << 20), ("2048K", 2 << 20), ("2M", 2 << 20),
                                            ("524288", 1 << 19), (" 32K\n", 32 << 10), ("", None), ("K", None),
                                            ("1.5M", None), ("n/a", None)])
def test_parse_size(text, expected):
    assert cpu_info.parse_size(text) == expected


def test_read_l2_picks_the_level_2_data_or_unified_cache(tmp_path):
    amd = _sysfs(tmp_path / "amd", [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                    (3, "Unified", "32768K")])
    assert cpu_info.read_l2(amd) == 1 << 20
    only_instruction = _sysfs(tmp_path / "odd", [(2, "Instruction", "512K"), (1, "Data", "48K")])
    assert cpu_info.read_l2(only_instruction) is None
    assert cpu_info.read_l2(tmp_path / "missing") is None


def test_l2_bytes_falls_back_when_unreadable_or_absurd(monkeypatch):
    for misread in (None, 1, 1 << 40):
        monkeypatch.setattr(cpu_info, "read_l2", lambda *a, m=misread: m)
        monkeypatch.setattr(cpu_info.os, "sysconf", lambda name: 0)
        cpu_info.l2_bytes.cache_clear()
        try:
            assert cpu_info.l2_bytes() == cpu_info.FALLBACK_L2
        finally:
            cpu_info.l2_bytes.cache_clear()
    monkeypatch.setattr(cpu_info, "read_l2", lambda *a: 3 << 20)
    try:
        assert cpu_info.l2_bytes() == 3 << 20
    finally:
        cpu_info.l2_bytes.cache_clear()


class _Wide:
    """An adapter whose width mhfast can read (an HF-like config), nothing else."""

    def __init__(self, width):
        self.model = type("M", (), {"config": type("C", (), {"hidden_size": width})()})()


@pytest.mark.parametrize("l2, flags, dtype, width, tokens", [
    (2 << 20, {"amx_bf16", "avx512_bf16"}, None, 512, 2048),               # the Xeon of bench/RESULTS.md, fp32
    (2 << 20, {"amx_bf16", "avx512_bf16"}, torch.bfloat16, 512, 8192),     # ... bf16 on AMX
    (1 << 20, {"avx512_bf16"}, torch.float32, 512, 1024),                 # the AMD EPYC, fp32
    (1 << 20, {"avx512_bf16"}, torch.bfloat16, 512, 2048),                # ... bf16 without AMX
    (1 << 20, {"avx2"}, None, 768, 682),                                  # BERT-base width
    (1 << 20, {"avx2"}, None, 8192, 256),                                 # very wide: the floor
])
def test_default_max_tokens_follows_width_and_l2(monkeypatch, l2, flags, dtype, width, tokens):
    monkeypatch.setattr(cpu_info, "l2_bytes", lambda: l2)
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset(flags))
    assert runner.default_max_tokens(_Wide(width), "cpu", dtype) == tokens
    # GPUs and models of unknown width keep the large fixed budget, whatever the CPU
    assert runner.default_max_tokens(_Wide(width), "cuda", dtype) == runner.GPU_MAX_TOKENS
    assert runner.default_max_tokens(object(), "cpu", dtype) == runner.GPU_MAX_TOKENS


def test_native_bf16_reads_the_flags(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx2"}))
    assert not precision.native(torch.bfloat16, cpu) and precision.native(torch.float32, cpu)
    with pytest.warns(RuntimeWarning, match="no native support"):
        precision.check_native(torch.bfloat16, cpu)
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx512_bf16"}))
    assert precision.native(torch.bfloat16, cpu)


@pytest.mark.parametrize("capability, bf16", [((7, 0), False), ((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_native_bf16_on_a_gpu_reads_its_compute_capability(monkeypatch, capability, bf16):
    """bf16 is native from compute capability 8.0; torch.cuda.is_bf16_supported() also counts older GPUs' slow
    emulation (True on a V100 or T4), so the warning never came there. The device asked about is the one read."""
    asked: list = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: asked.append(d) or capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what torch says on a V100
    gpu = torch.device("cuda", 1)
    assert precision.native(torch.bfloat16, gpu) is bf16 and asked == [gpu]
    assert precision.native(torch.float16, gpu)
    if not bf16:
        with pytest.warns(RuntimeWarning, match=r"compute capability < 8.0"):
            precision.check_native(torch.bfloat16, gpu)


def test_native_reads_arm_flags_too(monkeypatch, tmp_path):
    """An aarch64 /proc/cpuinfo lists ``Features``, not ``flags``: the x86-only reading found no flag there and
    warned that bf16 is not native on a Graviton3 that has the BF16 extension."""
    cpu = torch.device("cpu")
    arm = ["processor\t: 0", "BogoMIPS\t: 2100.00", "Features\t: fp asimd evtstrm fphp asimdhp bf16 i8mm",
           "CPU implementer\t: 0x41"]
    assert {"bf16", "asimdhp"} <= cpu_info.parse_flags(arm)
    monkeypatch.setattr(cpu_info, "flags", lambda: cpu_info.parse_flags(arm))
    assert precision.native(torch.bfloat16, cpu) and precision.native(torch.float16, cpu)
    monkeypatch.setattr(cpu_info, "flags", lambda: cpu_info.parse_flags(["Features\t: fp asimd"]))
    with pytest.warns(RuntimeWarning, match=r"no AVX512-BF16/AMX \(x86\) or BF16 \(Arm\)"):
        precision.check_native(torch.bfloat16, cpu)


def test_an_fp16_forward_takes_the_amx_batch_only_with_amx_fp16(monkeypatch):
    """AMX-BF16 tiles run no fp16: an fp16 forward on an AMX-BF16-only CPU keeps the 2x L2 rule."""
    monkeypatch.setattr(cpu_info, "l2_bytes", lambda: 2 << 20)
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"amx_bf16"}))
    assert runner.cpu_max_tokens(512, torch.float16) == 4096 and runner.cpu_max_tokens(512, torch.bfloat16) == 8192
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"amx_bf16", "amx_fp16"}))
    assert runner.cpu_max_tokens(512, torch.float16) == 8192


def test_the_float16_warning_on_a_cpu_names_the_fp16_flags(monkeypatch):
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx2"}))
    with pytest.warns(RuntimeWarning, match="AVX512-FP16"):
        precision.check_native(torch.float16, torch.device("cpu"))


def test_an_unreadable_cpu_is_unknown_not_lacking(monkeypatch):
    """No flags read (no /proc/cpuinfo): the warning says the features are unknown; it had stated as a fact that the
    CPU has no AVX512-BF16."""
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset())
    with pytest.warns(RuntimeWarning, match=r"features could not be read") as got:
        precision.check_native(torch.bfloat16, torch.device("cpu"))
    assert "CPU has no" not in str(got[0].message)
