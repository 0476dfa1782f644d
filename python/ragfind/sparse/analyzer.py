"""Text to index terms: the :class:`Analyzer` (tokenize, lower-case, stopwords, stem) in C++."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import Stemmer  # PyStemmer

from ragfind import _core

__all__ = ["ANALYZER_NAMES", "ENGLISH_STOPWORDS", "Analyzer", "resolve_analyzer"]

#: Lucene's English stop set (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET), the list bm25s uses.
ENGLISH_STOPWORDS: tuple[str, ...] = (
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they",
    "this", "to", "was", "will", "with",
)  # fmt: skip


def _snowball_stemmer(language: str):
    algorithms = Stemmer.algorithms()
    if language not in algorithms:
        raise ValueError(
            f"stemmer: unknown Snowball language {language!r}; expected None or one of {algorithms}"
        )
    return Stemmer.Stemmer(language)


class Analyzer:
    """Turns text into index terms: tokenize, lower-case, drop stopwords, stem.

    Tokens are runs of word characters (letters, digits, ``_``) of two or more characters,
    exactly ``re.findall(r"(?u)\\b\\w\\w+\\b", text)``; these count towards the document length.
    With ``split_identifiers`` the analyzer also emits, without counting them towards the
    length, the parts of identifiers (``getUserById`` -> ``get user by id``,
    ``E_ACCESS_DENIED`` -> ``access denied``) and whole compounds joined by ``-``, ``.`` or
    ``/`` that contain a digit (``XJ-2000`` -> ``xj-2000``, ``v2.3.1`` -> ``v2.3.1``): a query
    for the whole identifier or for one of its parts finds the document, and the exact
    identifier ranks first. With ``symbol_letters`` a one-letter token is kept (and counted)
    when it is written as a symbol: a capital (``T cells``, ``vitamin D``, ``hepatitis B``) or a
    Greek letter (``TNF-α``); lone lower-case letters and digits stay dropped. In a text with no
    lower-case letter at all (``I AM INTERESTED IN ...``) case says nothing, so there a capital
    is not a symbol (unless ``caps_text_symbols``). With ``fold_accents`` the accents of Latin
    letters are removed from the terms, so ``cafe`` finds ``café`` and ``naive`` finds ``naïve``
    (composed or decomposed; Unicode NFD with the combining marks dropped, before stemming).
    ``split_identifiers=False, symbol_letters=False, fold_accents=False`` gives exactly bm25s's
    tokens.
    Invalid UTF-8 bytes and lone surrogates are treated as separators. Stemming (PyStemmer's
    Snowball) runs once per distinct word form and is cached.

    Args:
        lowercase: lower-case tokens (Unicode simple case mapping).
        stopwords: ``"english"`` (Lucene's 33-word list, as bm25s), ``None`` for none, or an
            iterable of words (compared after lower-casing).
        stemmer: a Snowball language name (``"english"``, ``"french"``, ...; see
            ``Stemmer.algorithms()``) or ``None`` to disable stemming.
        split_identifiers: also emit identifier parts and compounds (see above).
        symbol_letters: keep one-letter capitals and Greek letters as terms (see above). Indexes
            saved before this option existed load with it off, so they analyze as before.
        caps_text_symbols: with ``symbol_letters``, keep one-letter capitals even in a text
            without lower-case letters (the default before 2026-12-07; off: +0.011 nDCG@10 on
            LISA's all-caps texts, no change elsewhere, bench/quality.md). Indexes saved
            before the option existed load with it on.
        fold_accents: remove the accents of Latin letters from the terms (``café`` ->
            ``cafe``; Latin-1 Supplement, Latin Extended-A/B and Additional; other scripts are
            left as they are). Applied before stemming, so that both spellings stem alike
            (``résumé`` and ``resume`` -> ``resum``). No change in nDCG@10 on the five English collections of
            bench/quality.md. Indexes saved before the option existed load with it off.
        tokenizer: optional Python callable ``str -> list[str]`` replacing the built-in
            tokenizer; its tokens are lower-cased, filtered and stemmed as configured and all
            count towards the length.
        cjk: index Han, Hiragana, Katakana and Hangul as overlapping character bigrams, as
            Lucene's CJKAnalyzer does (``東京都`` -> ``東京 京都``; a lone character stays a
            unigram); a run of word characters is cut where it changes between CJK and other
            scripts, and the other pieces get the analysis above. Unsegmented Chinese or
            Japanese text then finds a two-character word anywhere in a sentence.

    Named analyzers (``Analyzer.named(name)``, or the name itself wherever an analyzer is
    accepted): ``"default"`` (``Analyzer()``), ``"cjk"`` (``Analyzer(cjk=True)``) and
    ``"whitespace"`` (split on whitespace only: no lower-casing, stopwords or stemming, as
    Lucene's WhitespaceAnalyzer).

    Raises:
        ValueError: unknown stopword list or stemmer language.
        TypeError: tokenizer is not callable, stopwords is not iterable of str.
    """

    def __init__(
        self,
        lowercase: bool = True,
        stopwords: str | Iterable[str] | None = "english",
        stemmer: str | None = "english",
        split_identifiers: bool = True,
        tokenizer: Callable[[str], list[str]] | None = None,
        cjk: bool = False,
        symbol_letters: bool = True,
        caps_text_symbols: bool = False,
        fold_accents: bool = True,
    ) -> None:
        if isinstance(stopwords, str):
            if stopwords not in ("english", "en"):
                raise ValueError(
                    f"stopwords: unknown list {stopwords!r}; expected 'english', None or a list of words"
                )
            words = list(ENGLISH_STOPWORDS)
            stopwords_config: Any = "english"
        elif stopwords is None:
            words, stopwords_config = [], None
        else:
            words = list(stopwords)
            for w in words:
                if not isinstance(w, str):
                    raise TypeError(f"stopwords: expected str items, got {type(w).__name__}")
            stopwords_config = words
        if stemmer is not None and not isinstance(stemmer, str):
            raise TypeError(
                f"stemmer: expected a Snowball language name or None, got {type(stemmer).__name__}"
            )
        if tokenizer is not None and not callable(tokenizer):
            raise TypeError(
                f"tokenizer: expected a callable str -> list[str] or None, got {type(tokenizer).__name__}"
            )
        stem_words = _snowball_stemmer(stemmer).stemWords if stemmer is not None else None
        self._config = {
            "lowercase": bool(lowercase),
            "stopwords": stopwords_config,
            "stemmer": stemmer,
            "split_identifiers": bool(split_identifiers),
            "custom_tokenizer": tokenizer is not None,
            "symbol_letters": bool(symbol_letters),
            "caps_text_symbols": bool(caps_text_symbols),
            "fold_accents": bool(fold_accents),
        }
        if cjk:
            self._config["cjk"] = True  # absent for the others: older files read the same
        self._name: str | None = None
        self._tokenizer = tokenizer
        self._core = _core.Analyzer(
            bool(lowercase),
            words,
            stem_words,
            bool(split_identifiers),
            tokenizer,
            bool(cjk),
            bool(symbol_letters),
            bool(caps_text_symbols),
            bool(fold_accents),
        )

    @classmethod
    def named(cls, name: str) -> Analyzer:
        """The analyzer called ``name``: ``"default"``, ``"cjk"`` or ``"whitespace"``.

        Raises:
            ValueError: unknown name.
        """
        if name == "default":
            a = cls()
        elif name == "cjk":
            a = cls(cjk=True)
        elif name == "whitespace":
            a = cls(
                lowercase=False,
                stopwords=None,
                stemmer=None,
                split_identifiers=False,
                tokenizer=str.split,
                symbol_letters=False,
                fold_accents=False,
            )
            a._config["custom_tokenizer"] = False
        else:
            raise ValueError(f"analyzer: unknown name {name!r}; expected one of {ANALYZER_NAMES}")
        a._name = name
        a._config["name"] = name
        return a

    @property
    def name(self) -> str | None:
        """The name it was made by (:meth:`named`), else None."""
        return self._name

    def analyze_with_offsets(self, text: str) -> list[tuple[str, int, int]]:
        """``(term, start, end)`` for every index term of ``text`` in order: ``text[start:end]``
        is the surface the term came from (a word, an identifier part, a CJK bigram), so the
        offsets mark where a query term occurs. With a custom tokenizer each token is located
        by searching for it after the previous one (tokens not found verbatim are skipped).

        Raises:
            TypeError: ``text`` is not str.
        """
        if not isinstance(text, str):
            raise TypeError(f"text: expected str, got {type(text).__name__}")
        if self._tokenizer is None:
            return [(t, b, e) for t, b, e, _ in self._core.analyze_offsets(text)]
        out: list[tuple[str, int, int]] = []
        pos = 0
        for tok in self._tokenizer(text):
            at = text.find(tok, pos) if tok else -1
            if at < 0:
                continue
            pos = at + len(tok)
            # The tokenizer applied to its own token gives that token back for any sane one.
            for term in self._core.analyze(tok):
                out.append((term, at, pos))
        return out

    def analyze(self, text: str | bytes) -> list[str]:
        """Returns the index terms of ``text`` in order (overlapping identifier tokens included).

        Raises:
            TypeError: ``text`` is neither str nor bytes.
        """
        return self._core.analyze(text)

    __call__ = analyze

    def config(self) -> dict:
        """The settings (JSON-serialisable; a custom tokenizer is recorded only as a flag)."""
        return dict(self._config)

    @classmethod
    def from_config(cls, config: dict, tokenizer: Callable[[str], list[str]] | None = None) -> Analyzer:
        """Rebuilds an analyzer from :meth:`config` (pass the tokenizer if one was used).

        A config without ``symbol_letters`` or ``fold_accents`` (saved before the option
        existed) gets it off, one without ``caps_text_symbols`` gets it on: it analyzes as its
        index was built.
        """
        settings = {
            "symbol_letters": bool(config.get("symbol_letters", False)),
            "caps_text_symbols": bool(config.get("caps_text_symbols", True)),
            "fold_accents": bool(config.get("fold_accents", False)),
        }
        name = config.get("name")
        if name in ANALYZER_NAMES and tokenizer is None:
            a = cls.named(name)
            if all(a._config[k] == v for k, v in settings.items()):
                return a
        a = cls(
            lowercase=config["lowercase"],
            stopwords=config["stopwords"],
            stemmer=config["stemmer"],
            split_identifiers=config["split_identifiers"],
            tokenizer=tokenizer,
            cjk=bool(config.get("cjk", False)),
            **settings,
        )
        if name in ANALYZER_NAMES and tokenizer is None:
            a._config["name"] = name  # saved again, it loads the same way
        return a

    def __repr__(self) -> str:
        c = self._config
        if self._name is not None:
            return f"Analyzer.named({self._name!r})"
        return (
            f"Analyzer(lowercase={c['lowercase']}, stopwords={c['stopwords']!r}, stemmer={c['stemmer']!r}, "
            f"split_identifiers={c['split_identifiers']}, symbol_letters={c['symbol_letters']}, "
            f"caps_text_symbols={c['caps_text_symbols']}, fold_accents={c['fold_accents']}, "
            f"tokenizer={self._tokenizer!r})"
        )


#: The names :meth:`Analyzer.named` (and every ``analyzer=`` argument) accepts.
ANALYZER_NAMES: tuple[str, ...] = ("default", "cjk", "whitespace")


def resolve_analyzer(analyzer: Analyzer | str | None, default: str = "default") -> Analyzer:
    """``analyzer`` as an :class:`Analyzer`: an analyzer as is, a name through
    :meth:`Analyzer.named`, None as the ``default`` name.

    Raises:
        ValueError: unknown name.  TypeError: neither an Analyzer, a str nor None.
    """
    if analyzer is None:
        return Analyzer.named(default)
    if isinstance(analyzer, Analyzer):
        return analyzer
    if isinstance(analyzer, str):
        return Analyzer.named(analyzer)
    raise TypeError(
        f"analyzer: expected a ragfind.Analyzer, one of {ANALYZER_NAMES} or None, "
        f"got {type(analyzer).__name__}"
    )
