"""The page's one style sheet, served as ``/ui.css`` (the Content-Security-Policy allows styles
from the page's own origin only: no inline style, no CDN)."""

from __future__ import annotations

__all__ = ["LAYER_COLOURS", "STYLESHEET"]

#: The colour of each layer in the charts and their legends (also the CSS below).
LAYER_COLOURS = {
    "system": "#6b7280",
    "summary": "#d97706",
    "memories": "#7c3aed",
    "window": "#2563eb",
    "input": "#059669",
}

_LAYERS = "\n".join(
    f".l-{name} {{ fill: {colour}; background: {colour}; }}"
    for name, colour in LAYER_COLOURS.items()
)

STYLESHEET = (
    """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
       color: #111827; background: #f9fafb; }
header.top { background: #111827; color: #f9fafb; padding: 8px 16px; display: flex;
             gap: 16px; align-items: center; flex-wrap: wrap; }
header.top a { color: #f9fafb; text-decoration: none; }
header.top .brand { font-weight: 700; }
header.top form { margin-left: auto; display: flex; gap: 6px; }
main { padding: 12px 16px 40px; max-width: 1200px; }
h1 { font-size: 20px; margin: 8px 0 4px; }
h2 { font-size: 16px; margin: 22px 0 6px; border-bottom: 1px solid #e5e7eb; }
h3 { font-size: 14px; margin: 10px 0 4px; }
a { color: #1d4ed8; }
.crumbs { color: #6b7280; margin-bottom: 4px; }
.muted { color: #6b7280; }
.note { background: #eff6ff; border: 1px solid #bfdbfe; padding: 6px 10px; margin: 8px 0; }
.error { background: #fef2f2; border: 1px solid #fecaca; padding: 6px 10px; margin: 8px 0; }
.done { background: #ecfdf5; border: 1px solid #a7f3d0; padding: 6px 10px; margin: 8px 0; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e5e7eb;
         vertical-align: top; }
th { background: #f3f4f6; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.content { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; font: inherit; }
pre.data { white-space: pre-wrap; overflow-wrap: anywhere; background: #f3f4f6; padding: 6px;
           margin: 4px 0; font: 12px/1.4 ui-monospace, monospace; }
tr.summarised td { color: #6b7280; }
tr.boundary td { background: #fef3c7; font-weight: 600; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px;
         background: #e5e7eb; margin-right: 4px; }
.badge.pin { background: #fde68a; }
.badge.current { background: #bbf7d0; }
.badge.superseded { background: #fecaca; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(330px, 1fr));
         gap: 10px; }
.card { background: #fff; border: 1px solid #e5e7eb; padding: 8px 10px; }
.card.superseded-card { opacity: 0.8; border-style: dashed; }
.card .text { white-space: pre-wrap; overflow-wrap: anywhere; margin: 6px 0; }
.card dl { display: grid; grid-template-columns: max-content 1fr; gap: 0 8px; margin: 4px 0;
           font-size: 12px; }
.card dt { color: #6b7280; }
.card dd { margin: 0; overflow-wrap: anywhere; }
.actions { display: flex; gap: 8px; margin-top: 6px; font-size: 12px; }
.chain { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; margin: 6px 0;
         background: #fff; border: 1px solid #e5e7eb; padding: 6px; }
.chain .link { border: 1px solid #d1d5db; padding: 4px 6px; max-width: 360px; }
.chain .arrow { color: #6b7280; }
.tabs { display: flex; gap: 6px; flex-wrap: wrap; margin: 6px 0; }
.tabs a { padding: 2px 8px; border: 1px solid #d1d5db; background: #fff;
          text-decoration: none; }
.tabs a.on { background: #1d4ed8; color: #fff; border-color: #1d4ed8; }
.pager { margin: 8px 0; display: flex; gap: 10px; }
.report { background: #fff; border: 1px solid #e5e7eb; padding: 8px 10px; margin: 8px 0; }
.report h3 { margin-top: 0; }
.legend { display: flex; gap: 12px; flex-wrap: wrap; font-size: 12px; margin: 4px 0; }
.legend .swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
svg.chart { width: 100%; height: 180px; background: #fff; border: 1px solid #e5e7eb; }
svg.bar { width: 100%; height: 14px; }
svg .budget { stroke: #dc2626; stroke-width: 1.5; stroke-dasharray: 4 3; fill: none; }
form.search { display: flex; flex-wrap: wrap; gap: 6px 12px; align-items: end;
              background: #fff; border: 1px solid #e5e7eb; padding: 8px; }
form.search label { display: flex; flex-direction: column; font-size: 12px; }
form.search fieldset { display: flex; flex-wrap: wrap; gap: 2px 10px; border: 1px solid #e5e7eb;
                       padding: 2px 8px 4px; margin: 0; }
form.search fieldset legend { font-size: 12px; }
form.search label.check { flex-direction: row; align-items: center; gap: 3px; }
form.inline { display: inline; }
input, select, button { font: inherit; padding: 3px 6px; }
button.danger { background: #b91c1c; color: #fff; border: 1px solid #991b1b; }
details > summary { cursor: pointer; color: #1d4ed8; }
.login { max-width: 420px; margin: 40px auto; background: #fff; border: 1px solid #e5e7eb;
         padding: 16px; }
.login input[type=password] { width: 100%; }
"""
    + _LAYERS
    + "\n"
)
