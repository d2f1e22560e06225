"""The module tree as static HTML: the first level drawn, a page per module to open by
clicking it, and a search over every node; for the report and saved notebooks.

# NOTE: a static page cannot ask Python for a new layout, so the explorer draws ahead:
# the tree's first level, then one drawing per module (its path opened), breadth-first,
# at most :data:`MAX_PAGES` and :data:`MAX_BYTES` (a folded run is drawn once, through
# its first block). A click on a module's box shows that module's page, a click on an
# open module's label its parent's; a search hit shows the page of the innermost drawn
# module holding the
# node and outlines it (or the box it is in). Ids are stable across pages (``<page
# prefix><kind><suffix>``, :func:`ortlab.views._layout.suffix`), so a few lines of inline
# JavaScript (in ``_report``) find an element from a module path or node key alone. The
# module map and the search index are JSON in data attributes, HTML-escaped.
"""

from __future__ import annotations

import json

from ortlab import _html
from ortlab.views import _fragments, _gmodel, _hierarchy, _layout

MAX_PAGES = 24
"""Module pages drawn per tree."""

MAX_BYTES = 1_000_000
"""Module pages stop once a tree's pages take this many characters: each page draws the
whole tree, so an unfolded model's pages grow with its size (a 2-layer training Llama's
report was 11.5 MB). A module without a page opens its nearest drawn ancestor's."""

SEARCH_TEXT = 160
"""Characters of a node's search text kept in the index."""


def _pages(tree: _hierarchy.Tree) -> list[str]:
    """The modules that get a page, breadth-first: each module holding modules or
    several ops, folded runs through their first block."""
    out: list[str] = []
    queue = list(tree.root.children)
    while queue and len(out) < MAX_PAGES:
        module = queue.pop(0)
        fold = tree.folds.get(module.path)
        if fold is not None and fold.members[0] != module.path:
            continue
        if module.children or len(module.items) > 2:
            out.append(module.path)
        queue.extend(module.children)
    return out


def explorer_html(
    tree: _hierarchy.Tree,
    *,
    prefix: str,
    colors: dict[str, str] | None = None,
    caption: str = "",
) -> str:
    """The explorer of ``tree`` (see the module NOTE)."""
    pages: list[str] = []
    size = 0
    for n, path in enumerate(["", *_pages(tree)]):
        if size > MAX_BYTES:
            break
        page_prefix = f"{prefix}p{n}-"
        expanded = None if not path else tree.ancestors(path)
        model = _layout.layout(
            tree, expanded=expanded, id_prefix=page_prefix, colors=colors, caption=caption
        )
        rendered = _gmodel.render(model)
        title = "first level" if not path else f"module {path}"
        display = "block" if not path else "none"
        page = (
            f'<div class="ortlab-page" data-module="{_html.esc(path)}" '
            f'data-prefix="{_html.esc(page_prefix)}" style="display:{display}">'
            f"<p><b>{_html.esc(title)}</b> · click a module to open it, an open module's "
            "label to go up</p>"
            + _fragments.graph_html(rendered, _fragments.module_table(tree))
            + "</div>"
        )
        pages.append(page)
        size += len(page)
    modules = {
        _layout.suffix(m.path): [
            m.path,
            m.parent.path if m.parent is not None else "",
            tree.folds[m.path].members[0] if m.path in tree.folds else "",
        ]
        for m in tree.modules.values()
        if m.path
    }
    index = [
        [item.key, item.search[:SEARCH_TEXT], item.module, _layout.suffix(item.key), item.name]
        for key in tree.order
        if (item := tree.items[key]).kind != "weight"
    ]
    return (
        f'<div class="ortlab-explorer" data-modules="{_html.esc(json.dumps(modules))}" '
        f'data-items="{_html.esc(json.dumps(index))}">'
        '<input type="search" class="ortlab-explorer-search" placeholder="search: node name, '
        'op, module path, verdict reason, source line">'
        '<ul class="ortlab-hits"></ul>' + "".join(pages) + "</div>"
    )


SCRIPT = """
document.querySelectorAll('.ortlab-explorer').forEach(function (ex) {
  var mods = JSON.parse(ex.getAttribute('data-modules') || '{}');
  var items = JSON.parse(ex.getAttribute('data-items') || '[]');
  var pages = Array.prototype.slice.call(ex.querySelectorAll('.ortlab-page'));
  var byPath = {}, parent = {}, suffixOf = {}, foldOf = {};
  pages.forEach(function (p) { byPath[p.getAttribute('data-module')] = p; });
  Object.keys(mods).forEach(function (s) {
    parent[mods[s][0]] = mods[s][1]; suffixOf[mods[s][0]] = s; foldOf[mods[s][0]] = mods[s][2];
  });
  function pageFor(path) {
    while (path) { if (byPath[path]) { return byPath[path]; } path = parent[path] || ''; }
    return byPath[''];
  }
  function show(page) {
    pages.forEach(function (p) { p.style.display = p === page ? 'block' : 'none'; });
    ex.querySelectorAll('.ortlab-hl').forEach(function (e) {
      e.classList.remove('ortlab-hl');
    });
  }
  ex.addEventListener('click', function (ev) {
    var g = ev.target.closest('g.node, g.cluster');
    var page = g && g.closest('.ortlab-page');
    if (!page) { return; }
    var local = g.id.slice(page.getAttribute('data-prefix').length);
    var mod = mods[local.slice(1)];
    if (!mod) { return; }
    if (local[0] === 'm' || local[0] === 'f') { show(pageFor(mod[0])); }
    else if (local[0] === 'c' && ev.target.tagName === 'text') { show(pageFor(mod[1])); }
  });
  var box = ex.querySelector('.ortlab-explorer-search');
  var list = ex.querySelector('.ortlab-hits');
  box.addEventListener('input', function () {
    var q = box.value.trim().toLowerCase();
    list.innerHTML = '';
    if (!q) { return; }
    items.filter(function (it) { return it[1].indexOf(q) >= 0; }).slice(0, 50)
      .forEach(function (it) {
        var li = document.createElement('li');
        li.textContent = it[4] + ' · ' + (it[2] || '(model)');
        li.addEventListener('click', function () {
          var page = pageFor(it[2]);
          show(page);
          var pre = page.getAttribute('data-prefix');
          var el = document.getElementById(pre + 'n' + it[3]);
          var path = it[2];
          while (!el && path) {
            var s = suffixOf[path];
            var f = foldOf[path] && suffixOf[foldOf[path]];
            el = document.getElementById(pre + 'm' + s) ||
              document.getElementById(pre + 'f' + s) ||
              (f && document.getElementById(pre + 'f' + f));
            path = parent[path] || '';
          }
          if (el) { el.classList.add('ortlab-hl'); el.scrollIntoView({block: 'center'}); }
        });
        list.appendChild(li);
      });
  });
});
"""
"""The explorer's inline JavaScript (the report includes it once)."""
