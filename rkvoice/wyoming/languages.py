"""Language codes as Wyoming clients send them.

Home Assistant compares language codes exactly (a ``zh-CN`` pipeline finds no ``zh`` service), so
each language is announced with the region and script variants clients ask for; a request is
matched by its primary subtag, so ``zh``, ``zh-CN``, ``zh_CN`` and ``zh-Hans`` are all Chinese.
"""

from __future__ import annotations

VARIANTS = {
    "zh": ("zh", "zh-CN", "zh-Hans", "zh-Hans-CN", "zh-SG", "zh-TW", "zh-Hant", "zh-Hant-TW"),
    "en": ("en", "en-US", "en-GB", "en-AU", "en-CA", "en-IE", "en-IN", "en-NZ"),
}
"""What is announced for a primary language: Mandarin in either script (the engines speak and hear
Mandarin; zh-HK is Cantonese, which they do not), English in the common regions."""


def primary(language: str) -> str:
    """The primary subtag of a language code: "zh-Hans-CN" / "zh_CN" / "ZH" -> "zh"."""
    return language.replace("_", "-").split("-")[0].strip().lower()


def announced(languages: list[str] | tuple[str, ...]) -> list[str]:
    """``languages`` (primary codes) with the variants announced for each, in order, no repeats."""
    return list(dict.fromkeys(code for lang in languages for code in VARIANTS.get(primary(lang), (lang,))))
