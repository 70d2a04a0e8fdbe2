"""The matrix as one self-contained HTML page: inline CSS and script, every cell embedded as
JSON (each distinct string once), filters for distribution, python and platform, and a panel
with every check and its evidence."""

from __future__ import annotations

import html
import json
from typing import Any

from moonpin.resolver.matrix.model import STATES, Cell, Matrix, scope_pick
from moonpin.resolver.query import Check

__all__ = ["to_html"]


class _Strings:
    """A string table: the page embeds each distinct string once."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.items)
            self.items.append(s)
        return i


_LABELS = (("no wheel", "no wheel"), ("wrong module", "module"),
           ("no build for torch", "no build"), ("missing names", "names"),
           ("missing name", "name"), ("no backend", "backend"), ("CUDA major", "CUDA"),
           ("sglang does not admit", "torch req"))


def _label(c: Cell) -> str:
    """The one or two words an incompatible cell shows in the page (hover: the reason)."""
    return next((w for k, w in _LABELS if c.reason.startswith(k)), "no")


def _page_data(m: Matrix) -> dict[str, Any]:
    st = _Strings()
    row_ix = {(r.sglang, r.torch): i for i, r in enumerate(m.rows)}
    col_ix = {(c.dist, c.mooncake): i for i, c in enumerate(m.columns)}
    py_ix = {p: i for i, p in enumerate(m.pythons)}
    ar_ix = {a: i for i, a in enumerate(m.arches)}
    checks: list[list[Any]] = []
    check_ix: dict[Check, int] = {}
    cells = []
    for c in m.cells:
        cix = []
        for ch in c.checks:
            if ch not in check_ix:
                check_ix[ch] = len(checks)
                checks.append([st(ch.name), ch.ok, st(ch.detail), [st(e) for e in ch.evidence]])
            cix.append(check_ix[ch])
        cells.append([row_ix[(c.sglang, c.torch)], col_ix[(c.dist, c.mooncake)],
                      py_ix[c.python], ar_ix[c.arch], STATES.index(c.state), st(c.reason),
                      cix, [st(n) for n in c.notes], [st(r) for r in c.reasons],
                      st(c.wheel) if c.wheel else -1, st(_label(c))])
    proj_ix = {x: i for i, x in enumerate(m.projects)}
    ext = [[row_ix[(r.sglang, r.torch)], proj_ix[e.project], py_ix[p], ar_ix[a],
            st(e.requirement) if e.requirement is not None else -1, st(e.reason),
            1 if e.unknown else 0]
           for r, p, a, e in m.extensions()]
    return {
        "projects": list(m.projects),
        "ext": ext,
        "rows": [[r.sglang, r.torch, r.module or "", dict(r.cuda), r.unread or ""]
                 for r in m.rows],
        "cols": [[c.dist, c.mooncake, c.unread or ""] for c in m.columns],
        "pythons": m.pythons,
        "arches": m.arches,
        "dists": m.scope["dists"],
        "start": list(scope_pick(m, None, None)),
        "states": list(STATES),
        "strings": st.items,
        "checks": checks,
        "cells": cells,
    }


def _script_json(obj: Any) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' survives as itself."""
    text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_CSS = """
:root{--ok:#1a7f37;--okbg:#dafbe1;--note:#7a5b00;--notebg:#fff3c4;--bad:#a40e26;
--badbg:#ffe4e8;--unk:#4b4f56;--unkbg:#e8eaed;--line:#c9ced6}
*{box-sizing:border-box}
body{margin:0;font:13px/1.35 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#111;
background:#fff}
header{padding:10px 14px;border-bottom:1px solid var(--line)}
h1{font-size:18px;margin:0 0 4px}
.scope{color:#333;margin:2px 0 8px}
form{display:flex;flex-wrap:wrap;gap:14px;align-items:center}
label{white-space:nowrap}
select{font:inherit}
.legend{display:flex;gap:10px;flex-wrap:wrap;margin-top:8px}
.legend span{padding:2px 6px;border:1px solid var(--line);border-radius:3px}
#wrap{overflow:auto;max-height:calc(100vh - 190px);border-bottom:1px solid var(--line)}
table{border-collapse:separate;border-spacing:0}
th,td{border-right:1px solid var(--line);border-bottom:1px solid var(--line);padding:3px 5px;
white-space:nowrap}
thead th{position:sticky;top:0;z-index:2;background:#f3f4f6;font-weight:600;
vertical-align:bottom;text-align:center}
thead th .d{display:block;font-weight:400;color:#444;font-size:11px}
th.rh{position:sticky;left:0;z-index:1;background:#f3f4f6;text-align:left}
thead th.corner{left:0;z-index:3;text-align:left}
th.rh .t{display:block;font-weight:400;color:#444;font-size:11px}
td.cell{cursor:pointer;text-align:left;min-width:4.5em}
td.cell:focus{outline:2px solid #000;outline-offset:-2px}
.s0{background:var(--okbg);color:var(--ok)}
.s1{background:var(--notebg);color:var(--note)}
.s2{background:var(--badbg);color:var(--bad)}
.s3{background:var(--unkbg);color:var(--unk);font-style:italic}
td.dim{opacity:.35}
td.ext{text-align:left}
#panel{position:fixed;right:10px;bottom:10px;width:min(720px,96vw);max-height:60vh;overflow:auto;
background:#fff;border:2px solid #111;border-radius:6px;padding:10px 12px;z-index:10;
box-shadow:0 4px 18px rgba(0,0,0,.25)}
#panel[hidden]{display:none}
#panel h2{font-size:15px;margin:0 0 6px}
#panel ul{margin:4px 0;padding-left:18px}
#panel li{margin:3px 0}
#panel code{font-size:12px;background:#f3f4f6;padding:0 3px;word-break:break-all}
#panel .close{float:right;font:inherit;cursor:pointer}
footer{padding:8px 14px;color:#333;font-size:12px}
footer code{word-break:break-all}
"""

_JS = r"""
(function(){
"use strict";
var D=JSON.parse(document.getElementById("matrix-data").textContent);
var S=D.strings, SYM=["\u2714","\u26a0","\u2718","?"];
var WORD=["ok","note","","unknown"];
var OKM={"true":"\u2714 ok","false":"\u2718 FAIL","null":"? undecided"};
var byKey={};
D.cells.forEach(function(c,i){byKey[c[0]+"|"+c[1]+"|"+c[2]+"|"+c[3]]=i;});
var extKey={};
D.ext.forEach(function(x){extKey[x[0]+"|"+x[1]+"|"+x[2]+"|"+x[3]]=x;});
function extCell(ri,xi,pi,ai){var x=extKey[ri+"|"+xi+"|"+pi+"|"+ai],td;
 if(!x)return el("td","ext","");
 if(x[4]>=0){td=el("td","ext s0","\u2714 "+S[x[4]]);td.title="the newest release that fits";}
 else if(x[6]||!S[x[5]]){td=el("td","ext s3","? unknown");td.title=S[x[5]];}
 else{td=el("td","ext s2","\u2718 "+S[x[5]].split(":")[0]);td.title=S[x[5]];}
 td.dataset.project=D.projects[xi];return td;}
var f={dist:document.getElementById("f-dist"),py:document.getElementById("f-python"),
 ar:document.getElementById("f-arch"),hide:document.getElementById("f-hide")};
function opt(sel,val,text){var o=document.createElement("option");o.value=val;
 o.textContent=text;sel.appendChild(o);}
opt(f.dist,"","all ("+D.dists.length+")");
D.dists.forEach(function(d){opt(f.dist,d,d);});
D.pythons.forEach(function(p,i){opt(f.py,i,p);});
D.arches.forEach(function(a,i){opt(f.ar,i,a);});
f.py.value=String(Math.max(0,D.pythons.indexOf(D.start[0])));
f.ar.value=String(Math.max(0,D.arches.indexOf(D.start[1])));
function shortText(c){
 return SYM[c[4]]+" "+(c[4]===2?S[c[10]]:WORD[c[4]]);}
function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;
 if(text!==undefined)e.textContent=text;return e;}
function render(){
 var dist=f.dist.value,pi=+f.py.value,ai=+f.ar.value,hide=f.hide.checked;
 var cols=[],rows=[];
 D.cols.forEach(function(c,i){if(!dist||c[0]===dist)cols.push(i);});
 function cellOf(r,c){var k=byKey[r+"|"+c+"|"+pi+"|"+ai];return k===undefined?null:D.cells[k];}
 function live(c){return c&&c[4]!==2;}
 if(hide){cols=cols.filter(function(ci){
  return D.rows.some(function(_,ri){return live(cellOf(ri,ci));});});}
 D.rows.forEach(function(_,ri){
  if(!hide||cols.some(function(ci){return live(cellOf(ri,ci));}))rows.push(ri);});
 var t=el("table");t.id="matrix";var th=el("thead"),tr=el("tr");
 var corner=el("th","corner rh","SGLang \u00b7 torch");tr.appendChild(corner);
 cols.forEach(function(ci){var c=D.cols[ci];var h=el("th");h.scope="col";
  h.appendChild(el("span","d",c[0].replace("mooncake-transfer-engine","mte")));
  h.appendChild(document.createTextNode(c[1]+(c[2]?" (unread)":"")));tr.appendChild(h);});
 D.projects.forEach(function(x){var h=el("th","x");h.scope="col";
  h.appendChild(el("span","d","extension"));h.appendChild(document.createTextNode(x));
  tr.appendChild(h);});
 th.appendChild(tr);t.appendChild(th);var tb=el("tbody");
 rows.forEach(function(ri){var r=D.rows[ri];var row=el("tr");row.dataset.sglang=r[0];
  var h=el("th","rh",r[0]);h.scope="row";var cu=r[3][D.arches[ai]];
  var tl=r[1]==="?"?"":(cu===null||cu===undefined?" cpu":" cu"+cu);
  h.appendChild(el("span","t","torch "+r[1]+tl+(r[2]?" \u00b7 "+r[2]:"")));
  row.appendChild(h);
  cols.forEach(function(ci){var c=cellOf(ri,ci),td;
   if(!c){td=el("td","cell","");row.appendChild(td);return;}
   var st=D.states[c[4]];
   td=el("td","cell s"+c[4]+(hide&&c[4]===2?" dim":""),shortText(c));
   td.dataset.state=st;td.dataset.col=D.cols[ci][0]+"=="+D.cols[ci][1];
   td.dataset.cell=byKey[ri+"|"+ci+"|"+pi+"|"+ai];td.tabIndex=0;
   td.title=st+(c[5]>=0&&S[c[5]]?": "+S[c[5]]:"")+" (click for every check)";
   row.appendChild(td);});
  D.projects.forEach(function(_,xi){row.appendChild(extCell(ri,xi,pi,ai));});
  tb.appendChild(row);});
 t.appendChild(tb);var w=document.getElementById("wrap");w.textContent="";w.appendChild(t);
 document.getElementById("shown").textContent=rows.length+" rows \u00d7 "+cols.length+
  " columns on "+D.pythons[pi]+" / "+D.arches[ai];}
function show(i){var c=D.cells[i],r=D.rows[c[0]],col=D.cols[c[1]];
 var p=document.getElementById("panel");
 p.textContent="";var b=el("button","close","\u00d7 close");b.type="button";
 b.onclick=function(){p.hidden=true;};p.appendChild(b);
 p.appendChild(el("h2","",SYM[c[4]]+" "+D.states[c[4]]+": sglang "+r[0]+" + "+col[0]+"=="+col[1]));
 p.appendChild(el("div","","torch "+r[1]+" \u00b7 "+D.pythons[c[2]]+" / "+D.arches[c[3]]+
  (c[9]>=0?" \u00b7 wheel "+S[c[9]]:" \u00b7 no wheel")));
 if(c[8].length){p.appendChild(el("strong","","Reasons"));var u=el("ul");
  c[8].forEach(function(s){u.appendChild(el("li","",S[s]));});p.appendChild(u);}
 if(c[7].length){p.appendChild(el("strong","","Notes"));var n=el("ul");
  c[7].forEach(function(s){n.appendChild(el("li","",S[s]));});p.appendChild(n);}
 if(c[6].length){p.appendChild(el("strong","","Checks"));var l=el("ul");
  c[6].forEach(function(k){var ch=D.checks[k];
   var li=el("li","",OKM[String(ch[1])]+" "+S[ch[0]]+": "+S[ch[2]]);
   ch[3].forEach(function(e){var d=el("div");d.appendChild(document.createTextNode("evidence: "));
    d.appendChild(el("code","",S[e]));li.appendChild(d);});l.appendChild(li);});p.appendChild(l);}
 p.hidden=false;}
document.getElementById("wrap").addEventListener("click",function(e){
 var td=e.target.closest("td.cell");if(td&&td.dataset.cell)show(+td.dataset.cell);});
document.getElementById("wrap").addEventListener("keydown",function(e){
 var td=e.target.closest("td.cell");if(td&&td.dataset.cell&&(e.key==="Enter"||e.key===" ")){
 e.preventDefault();show(+td.dataset.cell);}});
document.addEventListener("keydown",function(e){if(e.key==="Escape")document.getElementById("panel").hidden=true;});
[f.dist,f.py,f.ar,f.hide].forEach(function(x){x.addEventListener("change",render);});
render();
})();
"""


def to_html(m: Matrix) -> str:
    """One self-contained page: inline CSS, inline script, the cells embedded as JSON."""
    e = html.escape
    kb = m.kb
    counts = m.counts()
    sc = m.scope
    scope = (f"Scope: distributions {', '.join(sc['dists'])}; python {sc['python']} "
             f"({', '.join(m.pythons)}); platform {sc['arch']} ({', '.join(m.arches)}); "
             f"sglang {sc['sglang']}; mooncake {sc['mooncake']}; torch {sc['torch']}. "
             f"{len(m.rows)} SGLang rows × {len(m.columns)} mooncake columns; "
             f"{len(m.cells)} cells: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    footer = (f"Built from knowledge base <code>{e(kb['path'] or '(in memory)')}</code> "
              f"(sha256 <code>{e(kb['sha256'] or 'n/a')}</code>), scraped "
              f"{e(kb['scraped_at'])} from "
              + (f"<code>{e(kb['index_url'])}</code>" if kb["index_url"] else "the package index")
              + f" by moonpin "
              f"{e(kb['moonpin_version'])}. Every verdict is read from the release "
              "artifacts; <code>moonpin explain</code> prints the same checks.")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>moonpin: SGLang × mooncake compatibility matrix</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>SGLang × mooncake compatibility matrix</h1>
<p class="scope" id="scope">{e(scope)}</p>
<form id="filters" onsubmit="return false">
<label>Distribution <select id="f-dist"></select></label>
<label>Python <select id="f-python"></select></label>
<label>Platform <select id="f-arch"></select></label>
<label><input type="checkbox" id="f-hide"> hide incompatible</label>
<span id="shown"></span>
</form>
<div class="legend" aria-label="legend">
<span class="s0">✔ ok: compatible</span>
<span class="s1">⚠ note: compatible, with a note</span>
<span class="s2">✘ incompatible (reason in the cell)</span>
<span class="s3">? unknown: not read, or not decidable</span>
<span>Hover a cell for its reason; click (or Enter) for every check and its evidence.</span>
<span>The last columns: the newest release of each native extension that fits the row
(SGLang's own pins and what its launch choices import, at the row's torch).</span>
</div>
</header>
<main id="wrap"><noscript>This page draws the table with its inline script; the same
data is in <code>moonpin matrix --format csv</code>.</noscript></main>
<aside id="panel" hidden aria-live="polite"></aside>
<footer id="footer">{footer}</footer>
<script type="application/json" id="matrix-data">{_script_json(_page_data(m))}</script>
<script>{_JS}</script>
</body>
</html>
"""
