"use strict";
(function () {
  // Sortable tables: click a header; numbers sort by their data-k value.
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, col) {
      th.addEventListener("click", function () {
        var asc = !th.classList.contains("asc");
        table.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col], y = b.cells[col];
          var kx = x.dataset.k, ky = y.dataset.k, r;
          if (kx !== undefined && ky !== undefined) { r = parseFloat(kx) - parseFloat(ky); }
          else { r = x.textContent.localeCompare(y.textContent); }
          return asc ? r : -r;
        });
        var show = parseInt(table.dataset.show || "1000000", 10);  // folded tables fold the new last rows
        rows.forEach(function (row, i) { body.appendChild(row); row.classList.toggle("more", i >= show); });
      });
    });
  });

  // Long tables: the first rows, the rest one click away (all rows stay in the page: print shows them).
  document.querySelectorAll("table.data.long").forEach(function (table) {
    var n = table.tBodies[0].rows.length, show = parseInt(table.dataset.show || "15", 10);
    table.classList.add("folded");
    var b = document.createElement("button");
    b.className = "more-rows"; b.type = "button";
    b.textContent = "Show all " + n + " rows";
    b.addEventListener("click", function () {
      var folded = table.classList.toggle("folded");
      b.textContent = folded ? "Show all " + n + " rows" : "Show the first " + show + " rows";
    });
    table.parentNode.insertAdjacentElement("afterend", b);
  });
  // Printing opens every folded part (evidence, capture tables, trace details).
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });

})();
