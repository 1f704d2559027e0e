// idemwatch: optional progressive enhancement. Every page works without this file.
// - a "Copy" button after each element with data-copy (keys);
// - "/" focuses the search box, as on many sites.
(function () {
  "use strict";
  document.querySelectorAll("[data-copy]").forEach(function (el) {
    if (!navigator.clipboard) return;
    var button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy the key to the clipboard");
    button.addEventListener("click", function () {
      navigator.clipboard.writeText(el.getAttribute("data-copy")).then(function () {
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = "Copy"; }, 1500);
      });
    });
    el.insertAdjacentElement("afterend", button);
  });
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    var typing = t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA" || t.isContentEditable);
    if (e.key === "/" && !typing && !e.ctrlKey && !e.metaKey && !e.altKey) {
      var q = document.getElementById("q");
      if (q) { e.preventDefault(); q.focus(); q.select(); }
    }
  });
})();
