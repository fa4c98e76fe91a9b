// The page: translate with /translate, read every attention map with /attention, draw one on a canvas.
"use strict";

const $ = (id) => document.getElementById(id);

// Viridis at nine evenly spaced points; colours in between are interpolated.
const VIRIDIS = [
  [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
];

const AXES = { // row and column labels and titles of each kind, as the API documents them
  encoder_self: (a) => [a.source_tokens, a.source_tokens, "source (query)", "source (key)"],
  decoder_self: (a) => [a.output_tokens, a.target_tokens, "predicting", "decoder input"],
  cross: (a) => [a.output_tokens, a.source_tokens, "predicting", "source"],
};
const KIND_NAMES = { encoder_self: "Encoder self-attention", decoder_self: "Decoder masked self-attention", cross: "Cross-attention" };

let attention = null; // the last /attention response
let layout = null; // where the drawn cells are, for the hover read-out

function colour(value) {
  const x = Math.min(Math.max(value, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const t = x - i;
  const [a, b] = [VIRIDIS[i], VIRIDIS[i + 1]];
  return `rgb(${a.map((c, k) => Math.round(c + t * (b[k] - c))).join(",")})`;
}

async function postJSON(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

async function showModel() {
  try {
    const info = await (await fetch("/info")).json();
    const m = info.model;
    const bleu = info.val_bleu === null ? "unknown" : info.val_bleu.toFixed(1);
    $("model-info").textContent = `${info.checkpoint} · ${(info.parameters / 1e6).toFixed(2)} M parameters · `
      + `${m.n_encoder_layers}+${m.n_decoder_layers} layers × ${m.n_heads} heads · `
      + `step ${info.step ?? "unknown"} · validation BLEU ${bleu}`;
  } catch (err) {
    $("model-info").textContent = "cannot reach the server";
  }
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function showTranslation(result) {
  $("translation").textContent = result.text || "(empty)";
  const rows = result.nbest.map((h, i) => {
    const row = document.createElement("tr");
    for (const [text, cls] of [[i + 1, "rank"], [h.score.toFixed(4), "score"], [h.text, "text"]]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      cell.className = cls;
      row.append(cell);
    }
    return row;
  });
  $("nbest-list").tBodies[0].replaceChildren(...rows);
  $("result").hidden = false;
}

function fillSelect(select, options, keep) {
  const previous = select.value;
  select.replaceChildren(...options.map(([value, text]) => new Option(text, value)));
  if (keep && options.some(([value]) => value === previous)) select.value = previous;
}

function showAttention(data) {
  attention = data;
  const layers = data.cross.length;
  const heads = data.cross[0].length;
  fillSelect($("layer"), [...Array(layers).keys()].map((l) => [String(l), `${l + 1} of ${layers}`]), true);
  if (!$("layer").dataset.touched) $("layer").value = String(layers - 1); // the last layer first
  const headOptions = [["mean", "average of heads"], ...[...Array(heads).keys()].map((h) => [String(h), `${h + 1}`])];
  fillSelect($("head"), headOptions, true);
  $("attention").hidden = false;
  draw();
}

function selectedMatrix() {
  const maps = attention[$("kind").value][Number($("layer").value)];
  if ($("head").value !== "mean") return maps[Number($("head").value)];
  return maps[0].map((row, i) => row.map((_, j) => maps.reduce((sum, head) => sum + head[i][j], 0) / maps.length));
}

function draw() {
  const kind = $("kind").value;
  const [rows, columns, rowTitle, columnTitle] = AXES[kind](attention);
  const matrix = selectedMatrix();
  const scale = $("stretch").checked ? Math.max(...matrix.flat(), 1e-6) : 1; // the weight drawn in yellow
  const head = $("head").value === "mean" ? "average of heads" : `head ${Number($("head").value) + 1}`;
  $("heatmap-title").textContent = `${KIND_NAMES[kind]} · layer ${Number($("layer").value) + 1} · ${head}`;

  const canvas = $("heatmap");
  const ctx = canvas.getContext("2d");
  const font = "13px system-ui, sans-serif";
  ctx.font = font;
  const widest = (labels) => Math.max(...labels.map((l) => ctx.measureText(l).width));
  const cell = Math.max(18, Math.min(40, Math.floor(640 / Math.max(rows.length, columns.length))));
  const left = widest(rows) + 34;
  const top = 10;
  const bottom = widest(columns) * 0.8 + 40; // column labels are turned 55°
  const gridW = cell * columns.length;
  const gridH = cell * rows.length;
  const width = left + gridW + 90; // room for the colour bar
  const height = Math.max(top + gridH + bottom, 200);

  const ratio = window.devicePixelRatio || 1; // sharp on high-density screens
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = font;

  matrix.forEach((row, i) => row.forEach((value, j) => {
    ctx.fillStyle = colour(value / scale);
    ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
  }));

  ctx.fillStyle = "#1f2430";
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  rows.forEach((label, i) => ctx.fillText(label, left - 6, top + (i + 0.5) * cell));
  columns.forEach((label, j) => {
    ctx.save();
    ctx.translate(left + (j + 0.5) * cell, top + gridH + 6);
    ctx.rotate(-Math.PI * 55 / 180);
    ctx.fillText(label, 0, 0);
    ctx.restore();
  });

  ctx.fillStyle = "#6b7280";
  ctx.textAlign = "center";
  ctx.fillText(columnTitle, left + gridW / 2, height - 10);
  ctx.save();
  ctx.translate(12, top + gridH / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.fillText(rowTitle, 0, 0);
  ctx.restore();

  drawColourBar(ctx, left + gridW + 24, top, Math.max(gridH, 120), scale);
  layout = { left, top, cell, rows, columns, matrix };
}

function drawColourBar(ctx, x, y, h, scale) {
  for (let k = 0; k < h; k++) {
    ctx.fillStyle = colour(1 - k / (h - 1));
    ctx.fillRect(x, y + k, 14, 1);
  }
  ctx.fillStyle = "#6b7280";
  ctx.textAlign = "left";
  ctx.fillText(scale.toFixed(2), x + 20, y + 6);
  ctx.fillText((scale / 2).toFixed(2), x + 20, y + h / 2);
  ctx.fillText("0.00", x + 20, y + h - 6);
}

function hover(event) {
  if (!layout) return;
  const box = $("heatmap").getBoundingClientRect();
  const j = Math.floor((event.clientX - box.left - layout.left) / layout.cell);
  const i = Math.floor((event.clientY - box.top - layout.top) / layout.cell);
  if (i < 0 || j < 0 || i >= layout.rows.length || j >= layout.columns.length) return;
  $("hover").textContent = `${layout.rows[i]} → ${layout.columns[j]}: ${layout.matrix[i][j].toFixed(3)}`;
}

async function translate() {
  const text = $("source").value.trim();
  if (!text) {
    showError("Type a sentence first.");
    return;
  }
  const beam = Number($("beam").value);
  const body = { text, beam, nbest: Math.min(Number($("nbest").value), beam) };
  if ($("max-len").value) body.max_len = Number($("max-len").value);
  const prefix = $("prefix").value.trim();
  const seen = { text, beam, ...(body.max_len ? { max_len: body.max_len } : {}), ...(prefix ? { prefix } : {}) };
  if (prefix) body.prefix = prefix;
  const phrases = $("constraints").value.split("\n").map((p) => p.trim()).filter((p) => p);
  if (phrases.length) body.constraints = phrases;
  if (phrases.length && $("in-order").checked) body.constraints_in_order = true;
  $("translate").disabled = true;
  showError("");
  try {
    const [translated, maps] = await Promise.all([
      postJSON("/translate", body),
      // an export or an ensemble shows no attention; /attention's search knows no constraints
      phrases.length ? null : postJSON("/attention", seen).catch(() => null),
    ]);
    showTranslation(translated.translations[0]);
    $("attention").hidden = maps === null;
    if (maps) showAttention(maps);
  } catch (err) {
    showError(err.message);
  } finally {
    $("translate").disabled = false;
  }
}

$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (e) => { if (e.key === "Enter" && e.ctrlKey) translate(); });
for (const id of ["kind", "layer", "head", "stretch"]) {
  $(id).addEventListener("change", () => { $(id).dataset.touched = "1"; draw(); });
}
$("heatmap").addEventListener("mousemove", hover);
showModel();
