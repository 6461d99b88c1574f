"""Measured tile choices (rstf/poly/tiles.py): the candidates the tuner measures, every one
of them bit-identical to the textbook C, and a profile's choice taken where it names a
contraction, refused where it cannot apply."""
import dataclasses
import re

import poly_cases
import pytest
from poly_cases import NATIVE, _bitwise_case

from rstf.poly.tilemodel import choose_tile, fits_registers
from rstf.poly.target import AVX2, AVX512
from rstf.poly.tiles import (Extents, TileChoice, TileTable, candidates, inside_variants,
                             valid)


@pytest.fixture(autouse=True)
def _shared_inputs_unchanged():
    """These tests draw inputs from poly_cases' shared RandomState: put it back as it was,
    so that the test modules after this one get the inputs they always got."""
    state = poly_cases.rng.get_state()
    yield
    poly_cases.rng.set_state(state)


@pytest.mark.parametrize("target", [AVX512, AVX2])
def test_candidates_start_with_the_models_choice_and_all_fit(target):
    ext = Extents(rows=128, cols=3072, outer=1, depth=768, call=768)
    model = TileChoice(*choose_tile(128, 3072, target)[:2], False)
    got = candidates(model, ext, target, 8)
    assert got[0] == model and len(got) == 8 and len(set(got)) == 8
    assert all(fits_registers(c.rb, c.nv, target) and valid(c, ext, target) for c in got)
    # Every vector width is tried before a second row count of any width.
    widths = {c.nv for c in got[1:1 + 4]}
    assert len(widths) >= 3


def test_candidates_flip_the_order_only_where_there_are_outer_points():
    model = TileChoice(7, 3, False)
    one = candidates(model, Extents(7, 160, 1, 960, 960), AVX512, 6)
    assert all(not c.tile_outer for c in one)
    many = candidates(model, Extents(7, 160, 7, 960, 960), AVX512, 6)
    assert many[1] == TileChoice(7, 3, True)
    # Narrow columns: no tile wider than the columns.
    narrow = candidates(TileChoice(9, 2, False), Extents(9, 40, 1, 8, 8), AVX512, 10)
    assert len(narrow) > 3 and all(AVX512.vlen * c.nv <= 40 for c in narrow)


def test_choice_labels_round_trip():
    for c in (TileChoice(6, 4, False), TileChoice(14, 1, True), TileChoice(8, 3, False, 4)):
        assert TileChoice.parse(c.label) == c
    assert TileChoice(8, 3, False, 16).label == "8x3 rows k16"
    assert TileChoice(8, 3, False).label == "8x3 rows"  # the target's steps: no suffix
    for c in (TileChoice(9, 2, True, 0, 2), TileChoice(8, 3, False, 16, 0)):
        assert TileChoice.parse(c.label) == c
    assert TileChoice(8, 3, False, 16, 0).label == "8x3 rows k16 in0"
    for bad in ("6x4", "6x4 sideways", "0x4 rows", "ax4 rows", "6x4 rows k3", "6x4 rows k",
                "6x4 rows x4", "6x4 rows k4 k8", "6x4 rows k0", "6x4 rows in3", "6x4 rows in",
                "6x4 rows in1 in2", "6x4 rows in-1", "6x4 rows in1 k4"):
        with pytest.raises(ValueError):
            TileChoice.parse(bad)


@pytest.mark.parametrize("target", [AVX512, AVX2])
def test_candidates_measure_the_models_tile_at_other_steps_a_trip(target):
    """`Target.k_steps` is a constant measured on two machines: the tuner measures the
    model's tile at half and twice it, right after the model's own loop orders."""
    model = TileChoice(*choose_tile(128, 768, target)[:2], False)
    one = candidates(model, Extents(128, 768, 1, 768, 768), target, 8)
    half, twice = target.k_steps // 2, 2 * target.k_steps
    assert one[1:3] == [TileChoice(model.rb, model.nv, False, half),
                        TileChoice(model.rb, model.nv, False, twice)]
    many = candidates(model, Extents(128, 768, 4, 768, 768), target, 8)
    assert many[1] == TileChoice(model.rb, model.nv, True) and many[2].steps == half
    # Only the model's tile is tried at other steps; every other candidate runs the target's.
    assert all(c.steps == 0 for c in one[3:]) and len(set(one)) == len(one)
    # A target of 2 steps a trip has no even half to try.
    two = dataclasses.replace(target, k_steps=2)
    assert [c.steps for c in candidates(model, Extents(128, 768, 1, 768, 768), two, 4)
            ][1:2] == [4]


def test_candidates_measure_other_reduction_levels_per_call():
    """Where a call runs only part of the reduction (35x35x192 3x3 to 224: ic, 192 of 1728
    steps), the model's tile is also measured with every outer reduction inside; where it
    runs some inside, with fewer. Not for merged rows, nor a reduction all in k."""
    conv = Extents(35, 224, 140, 1728, 192)
    assert inside_variants(conv) == (2,)
    got = candidates(TileChoice(9, 2, False), conv, AVX512, 8)
    assert TileChoice(9, 2, False, 0, 2) in got[:6] and len(set(got)) == len(got)
    whole = Extents(147, 64, 588, 288, 288, ("kin", "kin3"))
    assert inside_variants(whole) == (1, 0)
    assert inside_variants(Extents(73, 192, 292, 720, 240, ("kin",))) == (2, 0)
    assert inside_variants(Extents(49, 64, 1, 64, 64, ("merged",))) == ()
    assert inside_variants(Extents(128, 768, 1, 768, 768)) == ()
    assert not valid(TileChoice(9, 2, False, 0, 2), whole, AVX512)
    assert valid(TileChoice(9, 2, False, 0, 0), whole, AVX512)


@pytest.mark.parametrize("case,inside,reduction", [
    ("conv_same", 2, ["kh", "kw", "ic"]),  # ic alone by the model
    ("conv3x3_few_channels_whole_reduction", 0, ["ic"]),  # kh, kw and ic by the model
    ("conv3x3_few_channels_whole_reduction", 1, ["kw", "ic"]),
])
def test_a_profile_choice_of_the_reductions_a_call_runs_keeps_the_bits(case, inside, reduction):
    """A profile that measured another count of outer reductions inside each call
    (`TileChoice.inside`): the kernels run those, at the padding borders in chunks of fewer
    taps, the report names the choice, and the output is the textbook C's to the bit."""
    probe = dataclasses.replace(NATIVE, tiles=TileTable())
    info, _, _ = _bitwise_case(case, run=False, target=probe)
    tiled = info["tiled"][0]  # (then maybe a remainder's, which shares its choice)
    assert tiled["reduction"] != reduction
    choice = TileChoice(tiled["tile"][0], tiled["tile"][1] // NATIVE.vlen, False, 0, inside)
    target = dataclasses.replace(NATIVE, tiles=TileTable(((tiled["key"], choice),)))
    info, _, _ = _bitwise_case(case, target=target)
    assert (info["tiled"][0]["chosen_by"], info["tiled"][0]["choice"]) == (
        "profile", choice.label)
    assert all(t["reduction"] == reduction and t["border_chunks"] == (inside > 0)
               for t in info["tiled"]), info["tiled"]


def test_a_profile_choice_of_steps_a_trip_runs_and_keeps_the_bits():
    """A profile that measured 4 steps a trip for a contraction: its kernels run 4 steps
    a trip (their names say so), the report gives the choice, and the output is the
    textbook C's to the bit (each accumulator still steps in ascending k)."""
    probe = dataclasses.replace(NATIVE, tiles=TileTable())
    info, _, old = _bitwise_case("matmul", run=False, target=probe)
    key, (rb, width) = info["tiled"][0]["key"], info["tiled"][0]["tile"]
    steps = 4 if NATIVE.k_steps != 4 else 16
    choice = TileChoice(rb, width // NATIVE.vlen, False, steps)
    target = dataclasses.replace(NATIVE, tiles=TileTable(((key, choice),)))
    info, _, new = _bitwise_case("matmul", target=target)
    assert info["tiled"][0]["chosen_by"] == "profile"
    assert info["tiled"][0]["choice"] == choice.label
    trips = lambda c: set(re.findall(r"rstf_mk[a-z0-9]*?k(\d+)_", c))  # noqa: E731
    assert trips(old) == {str(NATIVE.k_steps)} and trips(new) == {str(steps)}


def test_table_takes_a_valid_measured_choice_and_refuses_others():
    ext = Extents(128, 3072, 1, 768, 768)
    model = TileChoice(8, 3, False)
    key = ext.key(AVX512)
    assert "threads=" in key and "rows=128" in key
    good = TileTable(((key, TileChoice(6, 4, False)),))
    assert good.pick(model, ext, AVX512) == (TileChoice(6, 4, False), "profile")
    # Too many accumulators for the registers, or column tiles around a single point.
    for bad in (TileChoice(14, 4, False), TileChoice(6, 4, True)):
        assert TileTable(((key, bad),)).pick(model, ext, AVX512) == (model, "model")
    assert TileTable().pick(model, ext, AVX512) == (model, "model")
    assert TileTable(variant=2).pick(model, ext, AVX512)[1] == "variant 2"
    assert TileTable(variant=99).pick(model, ext, AVX512) == (model, "model")


@pytest.mark.parametrize("case", ["matmul", "conv_same", "conv_deep_weights_packed",
                                  "conv_1x1_bn_relu6_in_registers",
                                  "conv_rgb_3x3_s2_bn_relu6_in_registers"])
def test_every_candidate_is_bit_identical_to_the_textbook_c(case):
    """The tuner's probes run every kernel in another candidate: each must compute what
    the model's tile computes, to the bit (the accumulation order does not depend on the
    tile)."""
    seen = set()
    for variant in range(5):
        target = dataclasses.replace(NATIVE, tiles=TileTable(variant=variant, limit=5))
        info, _, _ = _bitwise_case(case, target=target)
        tiled = [t for t in info["tiled"] if "key" in t]
        assert tiled, info["tiled"]
        assert all(t["chosen_by"] == ("model" if variant == 0 else f"variant {variant}")
                   or t["chosen_by"] == "model" for t in tiled)
        seen.add(tuple((tuple(t["tile"]), t["order"]) for t in tiled))
    assert len(seen) > 1  # the variants did change the tiles


def test_a_profile_choice_reaches_the_report():
    info, _, _ = _bitwise_case("matmul", run=False)
    model = info["tiled"][0]
    assert model["chosen_by"] == "model" and "key" not in model  # no table: no key asked
    probe = dataclasses.replace(NATIVE, tiles=TileTable())
    info, _, _ = _bitwise_case("matmul", run=False, target=probe)
    key = info["tiled"][0]["key"]
    rb, width = info["tiled"][0]["tile"]
    other = TileChoice(2 if rb != 2 else 3, 1, False)
    target = dataclasses.replace(NATIVE, tiles=TileTable(((key, other),)))
    info, _, _ = _bitwise_case("matmul", target=target)
    assert info["tiled"][0]["chosen_by"] == "profile"
    assert info["tiled"][0]["tile"] == [other.rb, NATIVE.vlen]


def test_a_column_tile_as_wide_as_its_operand_may_run_outermost():
    """Attention's context (probabilities x values, per head) with one column tile as wide
    as the values, its loop outermost (a profile's choice, or the tuner's probe of the
    other order): a one-iteration tile loop, with nothing for it to pack. It compiled to a
    panel buffer that was never declared."""
    case = "batch_matmul_whole_width_tile_tiles_outer"
    info, _, _ = _bitwise_case(case, run=False,
                               target=dataclasses.replace(NATIVE, tiles=TileTable()))
    key = info["tiled"][0]["key"]
    choice = TileChoice(2, 4, True)
    info, _, new = _bitwise_case(case, target=dataclasses.replace(
        NATIVE, tiles=TileTable(((key, choice),))))
    assert [(t["chosen_by"], t["tile"], t["order"]) for t in info["tiled"]] == [
        ("profile", [2, 4 * NATIVE.vlen], "column tiles outermost")]
    assert "_pack = " not in new  # no panel buffer
