// The console's theme, read before the page is painted: "dark" or "light" when the
// operator chose one (the toggle in the header; kept in localStorage), else the OS's.
(function () {
  "use strict";
  try {
    var chosen = window.localStorage.getItem("leasegate-theme");
    if (chosen === "dark" || chosen === "light") {
      document.documentElement.setAttribute("data-theme", chosen);
    }
  } catch (e) { /* storage refused: the OS's setting */ }
}());
