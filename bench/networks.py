"""The `--network` option the benches share: which study networks to time, by default the
studies' default network (the quickstart's: GPT-2's with rotary positions) and the same network
with learned positions, so every target is measured on both encodings."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaling.study.arms import network_name, network_options  # noqa: E402
from scaling.study.presets import QUICKSTART_NETWORK  # noqa: E402


def default_networks() -> list[str]:
    """The studies' default network and the same network with learned positions."""
    rope = network_options(QUICKSTART_NETWORK)
    return [network_name(rope), network_name({**rope, "pos": "learned"})]


def add_network_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--network", action="append",
                        help="a study network (gpt2, official, gpt2,pos=rope, ...); repeat to compare; "
                             f"default: {' and '.join(default_networks())}")


def checked_networks(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """`--network`'s values (default: `default_networks()`); an unknown one exits 2 naming it."""
    networks = args.network or default_networks()
    for network in networks:
        try:
            network_options(network)
        except ValueError as error:
            parser.error(f"--network: {error}")
    return networks


def differ_in_pos_only(a: str, b: str) -> bool:
    """Whether networks a and b are the same but for learned vs rotary positions."""
    options_a, options_b = network_options(a), network_options(b)
    return {options_a.pop("pos"), options_b.pop("pos")} == {"rope", "learned"} and options_a == options_b
