// berth's terminal page: xterm.js (embedded in the gateway) speaking ttyd's protocol
// (subprotocol `tty`): a JSON hello with the size, then one command byte per message.
// Client: 0 input, 1 resize. Server: 0 output, 1 title, 2 preferences.
const term = new Terminal({ rendererType: "dom", cursorBlink: true, screenReaderMode: true });
const fit = new FitAddon.FitAddon();
term.loadAddon(fit);
term.open(document.getElementById("screen"));
fit.fit();
term.focus();
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const scheme = location.protocol === "https:" ? "wss" : "ws";
const socket = new WebSocket(scheme + "://" + location.host + "/ws", ["tty"]);
socket.binaryType = "arraybuffer";
const send = (command, text) => socket.readyState === 1 && socket.send(encoder.encode(command + text));
term.onData((data) => send("0", data));
term.onResize(({ cols, rows }) => send("1", JSON.stringify({ columns: cols, rows: rows })));
window.addEventListener("resize", () => fit.fit());
socket.onopen = () => socket.send(JSON.stringify({ AuthToken: "", columns: term.cols, rows: term.rows }));
socket.onmessage = (event) => {
  const bytes = new Uint8Array(event.data);
  if (bytes[0] === 48) {
    term.write(decoder.decode(bytes.slice(1)));
    document.body.dataset.connected = "1";
  } else if (bytes[0] === 49) {
    document.title = decoder.decode(bytes.slice(1));
  }
};
socket.onclose = () => term.write("\r\n[the terminal closed]\r\n");
