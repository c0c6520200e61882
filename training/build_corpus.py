#!/usr/bin/env python3
"""Builds the training corpus of the project's trained model (models/README.md) from documentation
that Debian packages install under permissive licences. Run on the development machine (Debian 12):

    sudo apt-get install python3-doc postgresql-doc-15 python-django-doc sqlite3-doc nodejs-doc \
        cmake-doc sphinx-doc python3-sentencepiece python3-numpy
    python3 training/build_corpus.py --out training/corpus            # text, manifest, split
    python3 training/build_corpus.py --out training/corpus \
        --tokenizer models/docs-8m/tokenizer.model                     # + token files for train.py

Nothing it writes is committed (training/corpus/ is in .gitignore): the script is the record. It
writes into --out:
  manifest.json      packages, versions, licences (with the copyright file they were read from),
                     the cleaning rules, document and character counts of each split;
  train.txt          training documents, one paragraph per line, documents separated by an empty
                     line (the tokenizer's training text: `llama2 train-tokenizer --corpus`);
  heldout.txt        the held-out documents, the same layout (`llama2 perplexity --text-file`);
  train.bin, heldout.bin  with --tokenizer: uint16 token ids, every document as
                     <s> + encode(paragraphs joined by "\\n") + </s>, documents back to back.

Cleaning: from each HTML page only prose is kept. Navigation, sidebars, headers, footers, scripts,
styles, code blocks (<pre>), tables and the Sphinx permalink marks are dropped (inline code
inside a sentence stays, or the sentence would have holes); each block element
(<p>, <li>, <dd>, <dt>, <blockquote>, headings) becomes one paragraph with whitespace collapsed; a
paragraph is kept when it has at least MIN_WORDS words and at least MIN_WORD_SHARE of its
whitespace-separated tokens are plain words (letters, possibly with an apostrophe or hyphen, and
surrounding punctuation): this drops leftover code, option lists and tables of identifiers.
Paragraphs seen before (boilerplate repeated on many pages) are dropped after their first
occurrence. A page is one document; pages with fewer than MIN_DOC_PARAGRAPHS paragraphs are dropped.

Split: by document, from a hash of (package, path): HELDOUT_PERCENT of the documents are held out,
the same documents on every run, never mixed into training.
"""
import argparse
import glob
import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys

# (package, licence, the copyright file the licence was read from, HTML files)
SOURCES = [
    ("python3.11-doc", "PSF-2.0 (Python Software Foundation License Version 2)",
     "/usr/share/doc/python3.11-doc/copyright", "/usr/share/doc/python3.11/html/**/*.html"),
    ("postgresql-doc-15", "PostgreSQL (BSD-style permissive licence)",
     "/usr/share/doc/postgresql-doc-15/copyright", "/usr/share/doc/postgresql-doc-15/html/*.html"),
    ("python-django-doc", "BSD-3-clause (Django Software Foundation)",
     "/usr/share/doc/python-django-doc/copyright", "/usr/share/doc/python-django-doc/html/**/*.html"),
    ("sqlite3-doc", "public domain (SQLite)",
     "/usr/share/doc/sqlite3-doc/copyright", "/usr/share/doc/sqlite3/**/*.html"),
    ("nodejs-doc", "MIT (Expat; Node.js contributors)",
     "/usr/share/doc/nodejs-doc/copyright", "/usr/share/doc/nodejs/api/*.html"),
    ("cmake-doc", "BSD-3-clause (Kitware and contributors)",
     "/usr/share/doc/cmake-doc/copyright", "/usr/share/doc/cmake-data/html/**/*.html"),
    ("sphinx-doc", "BSD-2-clause (the Sphinx team)",
     "/usr/share/doc/sphinx-doc/copyright", "/usr/share/doc/sphinx-doc/html/**/*.html"),
]
# Parts of Sphinx/DocBook pages that are not prose of the page itself.
SKIP_TAGS = {"script", "style", "pre", "table", "nav", "head", "math", "svg"}
SKIP_CLASSES = {"related", "sphinxsidebar", "footer", "navheader", "navfooter", "headerlink",
                "toc", "highlight", "sphinxsidebarwrapper", "doc-sidebar", "breadcrumbs",
                "genindex", "modindex", "copyright", "versionmodified", "footnote", "citation"}
BLOCK_TAGS = {"p", "li", "dd", "dt", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "div",
              "section", "ul", "ol", "dl", "br", "td", "th", "tr", "caption", "figure"}
MIN_WORDS = 8
MIN_WORD_SHARE = 0.8
MIN_DOC_PARAGRAPHS = 3
HELDOUT_PERCENT = 3
WORD = re.compile(r"^[(\"'\u201c\u2018]*[A-Za-z]+(?:['\u2019-][A-Za-z]+)*[)\"'\u201d\u2019.,;:!?]*$")
# Index, search and change-log pages are lists, not prose.
SKIP_PAGES = re.compile(r"(genindex|py-modindex|search|whatsnew|changelog|releasenotes|release-"
                        r"|/releases/|bookindex|appendix-obsolete|/_)")


class ProseExtractor(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs = []
        self.buf = []
        self.skip = []  # stack of booleans: whether each open element is skipped

    def flush(self):
        text = " ".join("".join(self.buf).split())
        self.buf = []
        if text:
            self.paragraphs.append(text)

    def handle_starttag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        skipped = (self.skip and self.skip[-1]) or tag in SKIP_TAGS or bool(classes & SKIP_CLASSES)
        if tag in BLOCK_TAGS and not (self.skip and self.skip[-1]):
            self.flush()
        if tag in ("br", "img", "hr", "meta", "link", "input", "wbr"):  # void elements
            return
        self.skip.append(skipped)

    def handle_endtag(self, tag):
        if tag in ("br", "img", "hr", "meta", "link", "input", "wbr"):
            return
        if self.skip:
            self.skip.pop()
        if tag in BLOCK_TAGS and not (self.skip and self.skip[-1]):
            self.flush()

    def handle_data(self, data):
        if not (self.skip and self.skip[-1]):
            self.buf.append(data.replace("\u00b6", ""))  # Sphinx permalink pilcrows


def is_prose(paragraph):
    tokens = paragraph.split()
    if len(tokens) < MIN_WORDS:
        return False
    words = sum(1 for t in tokens if WORD.match(t))
    return words >= MIN_WORD_SHARE * len(tokens)


def package_version(pkg):
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], check=True,
                          capture_output=True, text=True).stdout.strip()


def documents(seen):
    """(package, relative path, [paragraphs]) for every page, in a fixed order."""
    for pkg, _, _, pattern in SOURCES:
        root = pattern.split("*")[0]
        for path in sorted(glob.glob(pattern, recursive=True)):
            rel = os.path.relpath(path, root)
            if SKIP_PAGES.search("/" + rel):
                continue
            parser = ProseExtractor()
            with open(path, encoding="utf-8", errors="replace") as f:
                parser.feed(f.read())
            parser.close()
            parser.flush()
            kept = []
            for p in parser.paragraphs:
                if is_prose(p) and p not in seen:
                    seen.add(p)
                    kept.append(p)
            if len(kept) >= MIN_DOC_PARAGRAPHS:
                yield pkg, rel, kept


def held_out(pkg, rel):
    digest = hashlib.sha256(f"{pkg}/{rel}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100 < HELDOUT_PERCENT


def tokenize(docs, tokenizer, path):
    import numpy as np
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=tokenizer)
    assert sp.get_piece_size() <= 65536, "uint16 token files need a vocabulary of at most 65536"
    ids = []
    for paragraphs in docs:
        ids.append(sp.bos_id())
        ids.extend(sp.encode("\n".join(paragraphs)))
        ids.append(sp.eos_id())
    np.array(ids, dtype=np.uint16).tofile(path)
    return len(ids), spm.__version__


def extract(out):
    sources = []
    for pkg, licence, copyright_file, pattern in SOURCES:
        if not os.path.isfile(copyright_file):
            sys.exit(f"{pkg} is not installed (no {copyright_file}): sudo apt-get install {pkg}")
        sources.append({"package": pkg, "version": package_version(pkg), "licence": licence,
                        "copyright_file": copyright_file, "html": pattern})
    split = {"train": [], "heldout": []}
    for pkg, rel, paragraphs in documents(set()):
        split["heldout" if held_out(pkg, rel) else "train"].append((pkg, rel, paragraphs))
    stats = {}
    for name, docs in split.items():
        with open(os.path.join(out, f"{name}.txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join("\n".join(p) for _, _, p in docs) + "\n")
        per_pkg = {}
        for pkg, _, p in docs:
            per_pkg[pkg] = per_pkg.get(pkg, 0) + sum(len(x) for x in p)
        stats[name] = {"documents": len(docs), "paragraphs": sum(len(p) for _, _, p in docs),
                       "characters": sum(len(x) for _, _, p in docs for x in p),
                       "characters_per_package": per_pkg,
                       "first_documents": [f"{pkg}/{rel}" for pkg, rel, _ in docs[:5]]}
        print(f"{name}: {stats[name]['documents']} documents, {stats[name]['paragraphs']} "
              f"paragraphs, {stats[name]['characters']} characters", flush=True)
    manifest = {
        "script": "training/build_corpus.py", "sources": sources,
        "cleaning": {"skip_tags": sorted(SKIP_TAGS), "skip_classes": sorted(SKIP_CLASSES),
                     "skip_pages": SKIP_PAGES.pattern, "min_words": MIN_WORDS,
                     "min_word_share": MIN_WORD_SHARE, "min_doc_paragraphs": MIN_DOC_PARAGRAPHS,
                     "duplicates": "dropped after the first occurrence"},
        "split": {"rule": f"sha256(package/path) % 100 < {HELDOUT_PERCENT} is held out", **stats}}
    with open(os.path.join(out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", help="tokenizer.model: also write train.bin and heldout.bin")
    ap.add_argument("--tokenize-only", action="store_true",
                    help="keep the .txt files already in --out, only (re)write the .bin files")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if not args.tokenize_only:
        extract(args.out)
    if not args.tokenizer:
        return
    manifest_path = os.path.join(args.out, "manifest.json")
    manifest = json.load(open(manifest_path, encoding="utf-8"))
    manifest["tokenizer"] = {"path": args.tokenizer, "sha256": hashlib.sha256(
        open(args.tokenizer, "rb").read()).hexdigest()}
    for name in ("train", "heldout"):
        text = open(os.path.join(args.out, f"{name}.txt"), encoding="utf-8").read()
        docs = [d.split("\n") for d in text.strip("\n").split("\n\n")]
        n, sp_version = tokenize(docs, args.tokenizer, os.path.join(args.out, f"{name}.bin"))
        manifest["split"][name].update({"tokens": n, "sentencepiece": sp_version})
        print(f"{name}: {n} tokens", flush=True)
    with open(manifest_path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
