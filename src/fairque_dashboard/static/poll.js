// fairque dashboard: a tiny poller (no dependencies) and the operator-token convenience.
// An element with data-poll="URL" data-every="SECONDS" has its content replaced by the HTML
// the URL returns, every SECONDS, while the page is visible and nobody is typing inside it.
(function () {
  "use strict";

  function busy(el) {
    var active = document.activeElement;
    if (active && el.contains(active) && active.tagName !== "A" && active.tagName !== "BUTTON") {
      return true;
    }
    var fields = el.querySelectorAll("input[name=token], input[type=checkbox]:checked");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].type === "checkbox" || fields[i].value) { return true; }
    }
    return false;
  }

  function poll(el) {
    var url = el.getAttribute("data-poll");
    var every = parseFloat(el.getAttribute("data-every") || "0");
    if (!url || !(every > 0)) { return; }
    var timer = null;
    function tick() {
      if (document.hidden || busy(el)) { schedule(); return; }
      fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fairque-poll" } })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          if (html !== null && !busy(el)) {
            el.innerHTML = html;
            el.setAttribute("data-polled", String(Date.now()));
            fillTokens(el);
          }
        })
        .catch(function () { /* the next tick tries again */ })
        .then(schedule);
    }
    function schedule() { timer = window.setTimeout(tick, every * 1000); }
    schedule();
    return timer;
  }

  // The token is kept for this tab only (sessionStorage), never in a cookie: forms carry it.
  var KEY = "fairque-dashboard-token";
  function fillTokens(root) {
    var saved = window.sessionStorage ? window.sessionStorage.getItem(KEY) : null;
    if (!saved) { return; }
    var fields = root.querySelectorAll("input[name=token]");
    for (var i = 0; i < fields.length; i++) {
      if (!fields[i].value) { fields[i].value = saved; }
    }
  }

  document.addEventListener("submit", function (event) {
    var field = event.target.querySelector("input[name=token]");
    if (field && field.value && window.sessionStorage) {
      window.sessionStorage.setItem(KEY, field.value);
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var els = document.querySelectorAll("[data-poll]");
    for (var i = 0; i < els.length; i++) { poll(els[i]); }
    fillTokens(document);
  });
})();
