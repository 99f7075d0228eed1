/* Behaviour for the console's pages. Pages carry no inline scripts or event handlers, so a
   Content-Security-Policy of script-src 'self' holds (console/middleware.py): figures arrive as
   JSON data blocks drawn here, confirmations as data-confirm attributes. */
(function () {
  "use strict";

  // Plotly figures (console/figures.py): <script type="application/json" class="plotly-figure"
  // data-target="ID" data-config="{...}">{"data": [...], "layout": {...}}</script> by <div id="ID">.
  function drawFigures(root) {
    if (!window.Plotly) return;
    root.querySelectorAll('script.plotly-figure[type="application/json"]').forEach(function (block) {
      if (block.dataset.drawn) return;
      var target = document.getElementById(block.dataset.target);
      if (!target) return;
      block.dataset.drawn = "1";
      var figure = JSON.parse(block.textContent);
      var config = block.dataset.config ? JSON.parse(block.dataset.config) : {};
      window.Plotly.newPlot(target, figure.data || [], figure.layout || {}, config);
    });
  }

  // <form data-confirm="question">: ask before submitting.
  function confirmForms(root) {
    root.querySelectorAll("form[data-confirm]").forEach(function (form) {
      if (form.dataset.confirmBound) return;
      form.dataset.confirmBound = "1";
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
  }

  // The run page's request table: a text filter and sortable columns (th[data-sort], "n" = numeric).
  function requestTable() {
    var table = document.getElementById("requests"), filter = document.getElementById("filter");
    if (!table || !filter || !table.tBodies.length) return;
    filter.addEventListener("input", function () {
      var q = filter.value.toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (tr) {
        tr.style.display = tr.textContent.toLowerCase().includes(q) ? "" : "none";
      });
    });
    table.tHead.querySelectorAll("th[data-sort]").forEach(function (th, col) {
      th.style.cursor = "pointer";
      th.addEventListener("click", function () {
        var numeric = th.dataset.sort === "n", dir = th.dataset.dir === "asc" ? -1 : 1;
        th.dataset.dir = dir === 1 ? "asc" : "desc";
        var rows = Array.from(table.tBodies[0].rows);
        rows.sort(function (a, b) {
          // a numeric cell shown with its unit ("85.7 ms", "1.23 s") carries its raw value in data-value
          var x = a.cells[col].dataset.value || a.cells[col].textContent.trim();
          var y = b.cells[col].dataset.value || b.cells[col].textContent.trim();
          return dir * (numeric ? (parseFloat(x) || 0) - (parseFloat(y) || 0) : x.localeCompare(y));
        });
        rows.forEach(function (r) { table.tBodies[0].appendChild(r); });
      });
    });
  }

  // The trace upload form: refuse an oversized file before sending it, then show upload progress.
  function uploadForm() {
    var form = document.getElementById("upload-form");
    if (!form || !window.FormData) return;
    form.addEventListener("submit", function (event) {
      var input = form.querySelector("input[type=file]");
      var max = parseInt(form.dataset.maxBytes, 10);
      var status = document.getElementById("upload-status");
      if (input.files.length && input.files[0].size > max) {
        event.preventDefault();
        alert("The file is " + input.files[0].size.toLocaleString() + " bytes; the limit is " + max.toLocaleString() + " bytes.");
        return;
      }
      event.preventDefault();
      if (event.submitter && event.submitter.name === "preview") {
        uploadPreview(form, event.submitter);
        return;
      }
      var box = document.getElementById("upload-progress");
      var bar = box.querySelector(".progress > span");
      box.hidden = false;
      form.querySelector("button[type=submit]").disabled = true;
      var xhr = new XMLHttpRequest();
      xhr.open("POST", form.action || window.location.href);
      xhr.setRequestHeader("X-Requested-With", "XMLHttpRequest");
      xhr.upload.onprogress = function (e) {
        if (!e.lengthComputable) return;
        var pct = Math.round(100 * e.loaded / e.total);
        bar.style.width = pct + "%";
        status.textContent = pct < 100 ? "Uploading… " + pct + "% of " + e.total.toLocaleString() + " bytes"
                                       : "Uploaded. Validating and importing…";
      };
      xhr.onload = function () {
        var type = xhr.getResponseHeader("Content-Type") || "";
        if (xhr.status === 200 && type.indexOf("application/json") === 0) {
          window.location.href = JSON.parse(xhr.responseText).redirect;
        } else {
          document.open(); document.write(xhr.responseText); document.close();
        }
      };
      xhr.onerror = function () { status.textContent = "The upload failed (connection lost)."; };
      xhr.send(new FormData(form));
    });
  }

  // Preview the first records with the mapping as typed, in place: nothing is stored, the form keeps its file.
  function uploadPreview(form, button) {
    var target = document.getElementById("upload-preview");
    var data = new FormData(form);
    data.append("preview", "1");
    button.disabled = true;
    var xhr = new XMLHttpRequest();
    xhr.open("POST", form.action || window.location.href);
    xhr.setRequestHeader("X-Requested-With", "XMLHttpRequest");
    xhr.onload = function () {
      button.disabled = false;
      var type = xhr.getResponseHeader("Content-Type") || "";
      if (type.indexOf("text/html") === 0 && xhr.responseText.indexOf("<html") === -1) {
        target.innerHTML = xhr.responseText;
      } else {
        document.open(); document.write(xhr.responseText); document.close();
      }
    };
    xhr.onerror = function () { button.disabled = false; target.textContent = "The preview failed (connection lost)."; };
    xhr.send(data);
  }

  // The comparison page's slice selector (templates/analysis/_slice_view.html): on a change, fetch
  // the page for that slice and swap #slice-view (its table and charts) in place; without this
  // script the form's "Show" button loads the same page.
  // The comparison's slice selector: one request per choice, the newest choice wins. Listeners
  // are bound once, on the document (the view they act on is replaced by each answer); a choice
  // made while an answer is on its way aborts that request, and a late answer for an older
  // choice is dropped, so the view always shows the slice selected last.
  var slice = { requested: null, seq: 0, controller: null };
  function sliceShow(form, value) {
    var view = document.getElementById("slice-view");
    if (!view || value === slice.requested) return;  // "Show" after a change: already on its way
    slice.requested = value;
    var seq = ++slice.seq;
    if (slice.controller) slice.controller.abort();
    slice.controller = window.AbortController ? new AbortController() : null;
    var url = new URL(form.action || window.location.href, window.location.href);
    url.searchParams.set("slice", value);
    view.setAttribute("aria-busy", "true");
    fetch(url.toString(), {
      credentials: "same-origin",
      headers: { "X-Requested-With": "fetch" },
      signal: slice.controller ? slice.controller.signal : undefined
    })
      .then(function (response) { return response.text(); })
      .then(function (text) {
        if (seq !== slice.seq) return;
        var current = document.getElementById("slice-view");
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("slice-view");
        if (!current) return;
        if (!fresh) { current.removeAttribute("aria-busy"); slice.requested = null; return; }
        if (window.Plotly) current.querySelectorAll(".plotly-graph-div").forEach(function (el) { window.Plotly.purge(el); });
        current.replaceWith(fresh);
        drawFigures(fresh);
        window.history.replaceState(null, "", url.toString());
      })
      .catch(function () {
        if (seq !== slice.seq) return;  // aborted for a newer choice
        slice.requested = null;
        var current = document.getElementById("slice-view");
        if (current) current.removeAttribute("aria-busy");
      });
  }
  function sliceSelector() {
    var view = document.getElementById("slice-view");
    if (!view || !window.fetch || !window.DOMParser) return;
    slice.requested = view.dataset.slice || null;
    document.addEventListener("change", function (event) {
      var select = event.target;
      if (select && select.id === "slice-select" && select.form) sliceShow(select.form, select.value);
    });
    document.addEventListener("submit", function (event) {
      var form = event.target;
      if (!form || form.id !== "slice-form") return;
      event.preventDefault();
      var select = form.querySelector("#slice-select");
      if (select) sliceShow(form, select.value);
    });
  }

  function init() {
    drawFigures(document);
    confirmForms(document);
    requestTable();
    uploadForm();
    sliceSelector();
    // Content htmx swaps in (the experiment page's live panel) gets the same treatment.
    document.body.addEventListener("htmx:load", function (event) {
      drawFigures(event.detail.elt);
      confirmForms(event.detail.elt);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
