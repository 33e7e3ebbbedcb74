"""report.md and a self-contained report.html from one list of blocks (headings, paragraphs,
tables, figures). Figures are linked in the markdown and embedded as base64 in the HTML."""
from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Block:
    """kind: h (text, level), p (text), table (headers, rows), fig (name, png, text as caption),
    list (rows of one string each; text is its class: `answer` or `warnings`)."""

    kind: str
    text: str = ""
    level: int = 2
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    name: str = ""
    png: bytes = b""


def num(v: float | None, digits: int = 4) -> str:
    """A number with `digits` significant digits; 'n/a' for None/NaN; 'inf' kept."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.{digits}g}"


def interval(value: float | None, lo: float | None, hi: float | None, n: int | str | None = None) -> str:
    """'value [lo, hi] (n=..)': every reported number carries its interval and n."""
    text = f"{num(value)} [{num(lo)}, {num(hi)}]"
    return f"{text} (n={n})" if n is not None else text


def to_markdown(title: str, blocks: list[Block]) -> str:
    """GitHub-flavoured markdown."""
    out = [f"# {title}", ""]
    for b in blocks:
        if b.kind == "h":
            out += ["#" * b.level + " " + b.text, ""]
        elif b.kind == "p":
            out += [b.text, ""]
        elif b.kind == "table":
            out += ["| " + " | ".join(b.headers) + " |", "|" + "---|" * len(b.headers)]
            out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in b.rows] + [""]
        elif b.kind == "fig":
            out += [f"![{b.text}](figures/{b.name})", "", f"*{b.text}*", ""]
        elif b.kind == "list":
            out += ([f"**{b.text.capitalize()}:**", ""] if b.text == "warnings" else []) + [f"- {r[0]}" for r in b.rows] + [""]
    return "\n".join(out)


ANSWER_BG, WARNINGS_BG = "#e3ecfa", "#fdf0d5"  # the summary's boxes (the HTML test looks for them)
STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:1em auto;color:#222}"
         "table{border-collapse:collapse;font-size:12px;margin-bottom:1em}"
         "td,th{border:1px solid #bbb;padding:2px 6px}th{background:#eee}"
         "figure img{max-width:100%;border:1px solid #ddd}"
         "figure{display:inline-block;vertical-align:top;max-width:49%;margin:0.3em 0.5% 0.3em 0}"
         "ul.answer,ul.warnings{font-size:13px;margin:0.3em 0;padding:0.4em 0.4em 0.4em 1.6em}"
         f"ul.answer{{background:{ANSWER_BG}}}ul.warnings{{background:{WARNINGS_BG}}}")


def to_html(title: str, blocks: list[Block]) -> str:
    """One self-contained HTML page (no external resources)."""
    e = html.escape
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
           f"<style>{STYLE}</style></head><body><h1>{e(title)}</h1>"]
    for b in blocks:
        if b.kind == "h":
            out.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif b.kind == "p":
            out.append(f"<p>{e(b.text)}</p>")
        elif b.kind == "table":
            head = "".join(f"<th>{e(h)}</th>" for h in b.headers)
            body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            out.append(f"<table><tr>{head}</tr>{body}</table>")
        elif b.kind == "fig":
            data = base64.b64encode(b.png).decode()
            out.append(f"<figure><img alt='{e(b.text)}' src='data:image/png;base64,{data}'>"
                       f"<figcaption>{e(b.text)}</figcaption></figure>")
        elif b.kind == "list":
            out.append(f"<ul class='{e(b.text)}'>" + "".join(f"<li>{e(r[0])}</li>" for r in b.rows) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out)
