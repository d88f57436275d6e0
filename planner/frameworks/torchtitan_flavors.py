"""torchtitan v0.2.2's model flavors: which catalog model a ``[model] name, flavor`` builds (the one table of the
TOML reader, :mod:`planner.frameworks.read.torchtitan`, and the writer, :mod:`planner.frameworks.emit`; it lives
below both so that neither imports the other for it)."""

from __future__ import annotations

TORCHTITAN_SRC = "pytorch/torchtitan@73a0e697 (v0.2.2) torchtitan/models/<name>/__init__.py"

#: (model name, flavor) -> catalog model (its shape is the flavor's) or the flavor's args (qwen3 dense flavors,
#: which the catalog does not carry; transcribed from torchtitan v0.2.2 models/qwen3/__init__.py).
FLAVORS: dict[tuple[str, str], str | dict] = {
    ("llama3", "8B"): "llama3.1-8b", ("llama3", "70B"): "llama3.1-70b", ("llama3", "405B"): "llama3.1-405b",
    ("deepseek_v3", "671B"): "deepseek-v3", ("deepseek_v3", "236B"): "deepseek-v2",
    ("deepseek_v3", "16B"): "deepseek-v2-lite",
    ("qwen3", "30B-A3B"): "qwen3-30b-a3b", ("qwen3", "235B-A22B"): "qwen3-235b-a22b",
    ("llama4", "17bx16e"): "llama4-scout", ("llama4", "17bx128e"): "llama4-maverick",
    ("gpt_oss", "20b"): "gpt-oss-20b", ("gpt_oss", "120b"): "gpt-oss-120b",
}
for _fl, (_dim, _layers, _heads, _hidden, _tied) in {
        "0.6B": (1024, 28, 16, 3072, True), "1.7B": (2048, 28, 16, 6144, True), "4B": (2560, 36, 32, 9728, True),
        "8B": (4096, 36, 32, 12288, False), "14B": (5120, 40, 40, 17408, False),
        "32B": (5120, 64, 64, 25600, False)}.items():
    FLAVORS[("qwen3", _fl)] = dict(
        name=f"qwen3-{_fl.lower()}", num_layers=_layers, hidden_size=_dim, num_heads=_heads, num_kv_heads=8,
        head_dim=128, ffn_hidden_size=_hidden, vocab_size=151936, activation="swiglu", position="rotary",
        norm="rmsnorm", bias=False, qk_norm=True, dropout=False, tied_embeddings=_tied, seq_len=4096,
        source=f"{TORCHTITAN_SRC.replace('<name>', 'qwen3')} flavor {_fl}")
