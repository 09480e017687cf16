// Touch input for the charts (plot.js), in the mouse's terms: `input` has stepAt(clientX),
// hover(clientX, clientY), release(clientX, double) (a press that did not move) and zoomTo(a, b).
"use strict";

const PlotTouch = (() => {
  const DRAG_PX = 6;  // a pointer move shorter than this is a click, not a zoom
  const DOUBLE_CLICK_MS = 300;  // a click waits this long for a second one (a double click zooms out)
  let lastTap = null;  // when the last single tap ended (event time), for a double tap

  // Fingers do what the mouse does: a tap shows the values and picks the step, a one-finger
  // horizontal drag zooms (vertical swipes scroll the page: touch-action pan-y), a pinch zooms to
  // the view that keeps the steps first under the fingers under them (pinching in to the whole
  // view or more: all steps), a double tap shows all steps.
  function bind(over, input) {
    let pinch = null;  // {ids, steps: the steps first under each finger, px: where each finger is now}
    let from = null;  // where the one finger went down (clientX)
    const finger = (e, id) => [...e.touches].find((t) => t.identifier === id);
    over.addEventListener("touchstart", (e) => {
      if (e.touches.length === 1) {
        from = e.touches[0].clientX;
        input.hover(e.touches[0].clientX, e.touches[0].clientY);
      } else if (e.touches.length === 2) {
        const [a, b] = e.touches;
        from = null;
        pinch = { ids: [a.identifier, b.identifier], steps: [input.stepAt(a.clientX), input.stepAt(b.clientX)],
                  px: [a.clientX, b.clientX] };
      }
    }, { passive: true });
    over.addEventListener("touchmove", (e) => {
      if (pinch) {
        pinch.px = pinch.ids.map((id, i) => (finger(e, id) || { clientX: pinch.px[i] }).clientX);
      } else if (from !== null && e.touches.length === 1) {
        input.hover(e.touches[0].clientX, e.touches[0].clientY);
        if (e.cancelable) e.preventDefault();  // a horizontal drag is ours (touch-action lets pan-y through)
      }
    }, { passive: false });
    over.addEventListener("touchend", (e) => {
      if (e.cancelable) e.preventDefault();  // no mouse events emulated after it: the touch was handled
      if (pinch) {
        if (e.touches.length < 2) pinchEnd();
        return;
      }
      const t = e.changedTouches[0], start = from;
      from = null;
      if (!t || start === null) return;
      const tap = Math.abs(t.clientX - start) < DRAG_PX;
      const double = tap && lastTap !== null && e.timeStamp - lastTap < DOUBLE_CLICK_MS;
      lastTap = tap && !double ? e.timeStamp : null;
      if (tap) input.release(t.clientX, double);
      else input.zoomTo(Math.min(input.stepAt(start), input.stepAt(t.clientX)), Math.max(input.stepAt(start), input.stepAt(t.clientX)));
    }, { passive: false });
    over.addEventListener("touchcancel", () => { pinch = null; from = null; });

    function pinchEnd() {
      const { steps: [sa, sb], px: [pa, pb] } = pinch;
      pinch = null;
      const perStep = (pb - pa) / (sb - sa);  // pixels per step, after the pinch
      if (!(perStep > 0)) return;  // fingers crossed, or both on one step: no view
      const box = over.getBoundingClientRect();
      const first = sa - (pa - box.left) / perStep;
      input.zoomTo(first, first + box.width / perStep);
    }
  }
  return { bind, DRAG_PX, DOUBLE_CLICK_MS };
})();
