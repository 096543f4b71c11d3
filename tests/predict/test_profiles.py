"""Network profiles: the built-ins, user files, and one-line errors for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.errors import UsageError
from commlens.predict.profiles import (
    MIN_GBPS,
    NetworkProfile,
    OpOverride,
    builtin_names,
    builtin_profiles,
    get_profile,
    get_profiles,
)

REQUIRED = {"loopback", "tcp-10g", "ipoib-100g", "rdma-100g", "roce-200g", "ib-ndr-400g", "nvlink"}


def test_builtins_are_complete_sourced_and_ordered() -> None:
    profiles = builtin_profiles()
    assert REQUIRED <= {p.name for p in profiles}
    for p in profiles:
        assert len(p.source) > 20, f"{p.name} states no source"
        assert p.scope in ("intra", "inter", "both")
    rates = [p.effective_Gbps for p in profiles]
    assert rates == sorted(rates)
    assert builtin_names()[0] in ("loopback", "tcp-10g")


def test_reference_figures() -> None:
    tcp, ipoib, rdma = (get_profile(n) for n in ("tcp-10g", "ipoib-100g", "rdma-100g"))
    assert tcp.effective_Gbps == pytest.approx(9.0)  # Study A's TCP peak
    assert 20 <= ipoib.effective_Gbps <= 40
    assert rdma.effective_Gbps == pytest.approx(90.0)
    assert tcp.latency_s > ipoib.latency_s > rdma.latency_s


def test_user_file_with_op_overrides(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'name = "lab"\nsource = "bench run 2026-01-01"\nscope = "inter"\n'
        "[link]\nlatency_s = 5e-6\nbandwidth_Gbps = 25\nefficiency = 0.8\n"
        '[ops.all_reduce]\nalpha_s = 7e-6\nbeta_s_per_byte = 4e-10\nr2 = 0.999\nfit = "t = ..."\n'
    )
    p = get_profile(str(path))
    assert p.name == "lab" and p.effective_Gbps == pytest.approx(20.0)
    assert p.alpha("all_reduce") == 7e-6 and p.beta("all_reduce") == 4e-10
    assert p.beta("send") == pytest.approx(8 / 20e9)
    assert [q.name for q in get_profiles(f"tcp-10g, {path}")] == ["tcp-10g", "lab"]


def test_bench_fit_output_loads(tmp_path: Path) -> None:
    fit = pytest.importorskip("commlens.bench.fit")
    profile = {
        "name": "fitted",
        "description": "fitted by commlens bench",
        "scope": "inter",
        "source": "commlens bench --fit",
        "link": {"latency_s": 3e-5, "bandwidth_Gbps": 2.0, "efficiency": 0.96},
        "ops": {"all_reduce": {"alpha_s": 2e-5, "beta_s_per_byte": 4.2e-9, "r2": 0.99}},
    }
    path = fit.write_profile(tmp_path / "fitted.toml", profile)
    p = get_profile(str(path))
    assert p.name == "fitted" and p.beta("all_reduce") == 4.2e-9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name = 'x'\n", "missing \\[link\\]"),
        ("[link]\nlatency_s = 1e-6\nbandwidth_Gbps = 1\n", "name"),
        ("name = 'x'\n[link]\nbandwidth_Gbps = 1\n", "latency_s"),
        ("name = 'x'\n[link]\nlatency_s = 1e-6\nbandwidth_Gbps = -1\n", "bandwidth_Gbps"),
        (
            "name = 'x'\n[link]\nlatency_s = 1e-6\nbandwidth_Gbps = 1\nefficiency = 2\n",
            "efficiency",
        ),
        ("name = 'x'\nscope = 'moon'\n[link]\nlatency_s = 0\nbandwidth_Gbps = 1\n", "scope"),
        ("name = 'x'\n[link]\nlatency_s = 'fast'\nbandwidth_Gbps = 1\n", "number"),
        (
            "name = 'x'\n[link]\nlatency_s = 0\nbandwidth_Gbps = 1\n[ops.shuffle]\nalpha_s = 1\n",
            "op",
        ),
        ("name = = 'x'\n", "not valid TOML"),
    ],
)
def test_bad_profile_is_one_line_error_naming_the_file(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message) as err:
        get_profile(str(path))
    assert "\n" not in str(err.value) and "bad.toml" in str(err.value)


def test_unknown_names() -> None:
    with pytest.raises(UsageError, match=r"built-ins: .*rdma-100g"):
        get_profile("carrier-pigeon")
    with pytest.raises(UsageError, match="does not exist"):
        get_profile("/nonexistent/net.toml")
    with pytest.raises(UsageError, match="no network profile"):
        get_profiles(" , ")
    with pytest.raises(UsageError, match="at most 32 at once"):
        get_profiles(",".join(["tcp-10g"] * 10_000))


LINK = "name = 'x'\n[link]\nlatency_s = {lat}\nbandwidth_Gbps = {bw}\nefficiency = {eff}\n"


@pytest.mark.parametrize(
    ("lat", "bw", "eff", "key"),
    [
        ("nan", "10", "0.9", "latency_s"),
        ("1e-6", "inf", "0.9", "bandwidth_Gbps"),
        ("1e-6", "-inf", "0.9", "bandwidth_Gbps"),
        ("1e-6", "10", "nan", "efficiency"),
        ("1e-6", "1e-300", "0.9", "bandwidth_Gbps"),
        ("1e-6", "0", "0.9", "bandwidth_Gbps"),
        ("1e-6", "1e12", "0.9", "bandwidth_Gbps"),
        ("-1e-6", "10", "0.9", "latency_s"),
        ("1e9", "10", "0.9", "latency_s"),
        ("1e-6", "10", "1e-300", "efficiency"),
    ],
)
def test_non_finite_or_implausible_link_is_refused(
    tmp_path: Path, lat: str, bw: str, eff: str, key: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(LINK.format(lat=lat, bw=bw, eff=eff))
    with pytest.raises(UsageError, match=key) as err:
        get_profile(str(path))
    assert "\n" not in str(err.value) and "bad.toml" in str(err.value)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("alpha_s = nan", "alpha_s"),
        ("beta_s_per_byte = inf", "beta_s_per_byte"),
        ("beta_s_per_byte = 0.0", "beta_s_per_byte"),
        ("beta_s_per_byte = 1e-300", "beta_s_per_byte"),
        ("alpha_s = 1e300", "alpha_s"),
        ("r2 = nan", "r2"),
        ("weight = 1.0", "unknown key 'weight'"),
    ],
)
def test_bad_op_override_is_refused(tmp_path: Path, override: str, key: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(LINK.format(lat=1e-6, bw=10, eff=0.9) + f"[ops.all_reduce]\n{override}\n")
    with pytest.raises(UsageError, match=key) as err:
        get_profile(str(path))
    assert "\n" not in str(err.value) and "ops.all_reduce" in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ("name = 'x'\n" + "# padding\n" * 10000, "over 65,536 bytes"),
        (LINK.format(lat=1e-6, bw=10, eff=0.9) + "speed = 'warp'\n", "unknown key 'speed'"),
        ("colour = 'red'\n" + LINK.format(lat=1e-6, bw=10, eff=0.9), "unknown key 'colour'"),
        ("source = 7\n" + LINK.format(lat=1e-6, bw=10, eff=0.9), "source must be a string"),
        ("source = [[[1]]]\n" + LINK.format(lat=1e-6, bw=10, eff=0.9), "source must be a string"),
        ('name = "a\\nb"\n[link]\nlatency_s = 0\nbandwidth_Gbps = 1\n', "printable line"),
        ("name = 'x'\n[link]\nlatency_s = true\nbandwidth_Gbps = 1\n", "number"),
        ("name = 'x'\nops = 3\n[link]\nlatency_s = 0\nbandwidth_Gbps = 1\n", r"\[ops\]"),
    ],
)
def test_hostile_file_is_one_line_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message) as err:
        get_profile(str(path))
    assert "\n" not in str(err.value) and "bad.toml" in str(err.value)


def test_a_folder_is_not_a_profile(tmp_path: Path) -> None:
    folder = tmp_path / "net.toml"
    folder.mkdir()
    with pytest.raises(UsageError, match="is a folder"):
        get_profile(str(folder))


def test_profiles_built_in_code_are_checked_too() -> None:
    with pytest.raises(UsageError, match="bandwidth_Gbps"):
        NetworkProfile(name="x", latency_s=1e-6, bandwidth_Gbps=float("nan"))
    with pytest.raises(UsageError, match="alpha_s"):
        NetworkProfile(
            name="x", latency_s=0, bandwidth_Gbps=1, ops={"send": OpOverride(float("inf"))}
        )
    edge = NetworkProfile(name="edge", latency_s=0.0, bandwidth_Gbps=MIN_GBPS)
    assert edge.beta("all_reduce") == pytest.approx(8 / (MIN_GBPS * 1e9))


def test_predict_with_a_nan_profile_exits_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from commlens.cli.main import main

    path = tmp_path / "nan.toml"
    path.write_text(LINK.format(lat="nan", bw="inf", eff=0.9))
    code = main(
        ["predict", "--model", "gpt-125m", "--scheme", "dp", "--dp", "4", "--net", str(path)]
    )
    captured = capsys.readouterr()
    assert code != 0 and captured.out == ""
    assert captured.err.startswith("commlens predict: error: ") and captured.err.count("\n") == 1
    assert "latency_s must be a finite number" in captured.err


def test_any_parser_failure_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tomllib

    def explode(text: str) -> dict[str, object]:
        raise MemoryError("out of memory")

    monkeypatch.setattr(tomllib, "loads", explode)
    path = tmp_path / "net.toml"
    path.write_text(LINK.format(lat=1e-6, bw=10, eff=0.9))
    with pytest.raises(UsageError, match=r"net\.toml cannot be parsed as TOML: out of memory"):
        get_profile(str(path))
