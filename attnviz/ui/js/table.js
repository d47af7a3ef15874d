// attnviz's table (attnviz/ui/tables.py): a plain HTML table that stays on the page between script runs.  The
// script sends the columns (name, kind, digits, a bar's range, help) and the rows as JSON; this draws them, sorts
// on a header click (again: the other way; the order is kept for the next data), draws a "bar" column's values as
// bars on their range, filters the rows with the toolbar's search, downloads them as CSV, and sends a clicked row's
// index in the data to Python as the trigger value "row".  Every value is set as text, never parsed as HTML.

function cellText(column, value) {
  if (value === null || value === undefined) return "";
  if (typeof value !== "number") return String(value);
  return column.digits === null || column.digits === undefined ? String(value) : value.toFixed(column.digits);
}

function compare(a, b) {
  // numbers in order, empty cells last, text by the browser's collation
  const emptyA = a === null || a === undefined, emptyB = b === null || b === undefined;
  if (emptyA || emptyB) return emptyA - emptyB;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b));
}

function shownRows(root) {
  // the data's row indices as shown: sorted by the chosen column (stable), then filtered by the search
  const {data, sort, search} = root.__attnviz;
  let order = data.rows.map((_, index) => index);
  if (sort) {
    const sign = sort.descending ? -1 : 1;
    order.sort((i, j) => sign * compare(data.rows[i][sort.column], data.rows[j][sort.column]) || i - j);
  }
  const needle = search.trim().toLowerCase();
  if (needle) {
    order = order.filter((index) => data.columns.some((column, c) =>
      cellText(column, data.rows[index][c]).toLowerCase().includes(needle)));
  }
  return order;
}

function csvField(value) {
  if (value === null || value === undefined) return "";
  let text = String(value);
  if (typeof value !== "number" && /^[=+\-@\t\r]/.test(text)) text = "'" + text;  // a spreadsheet must not run it
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

function downloadCsv(root) {
  const {data} = root.__attnviz;
  const lines = [data.columns.map((column) => csvField(column.name)).join(",")];
  for (const index of shownRows(root)) lines.push(data.rows[index].map(csvField).join(","));
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([lines.join("\r\n") + "\r\n"], {type: "text/csv"}));
  link.download = data.csv_name;
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
}

function headerCell(root, column, index) {
  const {sort} = root.__attnviz;
  const th = document.createElement("th");
  th.scope = "col";
  th.tabIndex = 0;
  if (column.help) th.title = column.help;
  if (column.kind !== "text") th.className = "attnviz-number";
  const sorted = sort && sort.column === index;
  th.setAttribute("aria-sort", sorted ? (sort.descending ? "descending" : "ascending") : "none");
  th.append(column.name, Object.assign(document.createElement("span"), {
    className: "attnviz-sort", textContent: sorted ? (sort.descending ? " ▼" : " ▲") : ""}));
  const choose = () => {
    const state = root.__attnviz;
    state.sort = state.sort && state.sort.column === index ? {column: index, descending: !state.sort.descending}
                                                           : {column: index, descending: false};
    draw(root);
  };
  th.addEventListener("click", choose);
  th.addEventListener("keydown", (event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); choose(); } });
  return th;
}

function bodyCell(column, value) {
  const td = document.createElement("td");
  const text = cellText(column, value);
  if (column.kind === "text") {
    td.textContent = text;
    return td;
  }
  td.className = "attnviz-number";
  if (column.kind !== "bar") {
    td.textContent = text;
    return td;
  }
  const span = column.high - column.low;
  const fraction = typeof value === "number" && span > 0 ? Math.min(1, Math.max(0, (value - column.low) / span)) : 0;
  const cell = document.createElement("div");
  cell.className = "attnviz-bar-cell";
  const bar = document.createElement("div");
  bar.className = "attnviz-bar";
  const fill = document.createElement("div");
  fill.className = "attnviz-bar-fill";
  fill.style.width = `${(100 * fraction).toFixed(1)}%`;
  bar.appendChild(fill);
  cell.append(bar, Object.assign(document.createElement("span"), {textContent: text}));
  td.appendChild(cell);
  return td;
}

function draw(root) {
  // the table for the current data, sort and search
  const state = root.__attnviz, {data} = state;
  const head = document.createElement("tr");
  data.columns.forEach((column, index) => head.appendChild(headerCell(root, column, index)));
  const body = document.createElement("tbody");
  for (const index of shownRows(root)) {
    const tr = document.createElement("tr");
    tr.dataset.row = String(index);
    data.columns.forEach((column, c) => tr.appendChild(bodyCell(column, data.rows[index][c])));
    if (data.clicks) {
      tr.tabIndex = 0;
      tr.className = "attnviz-clickable";
      if (index === state.picked) tr.classList.add("attnviz-picked");
    }
    body.appendChild(tr);
  }
  const thead = document.createElement("thead");
  thead.appendChild(head);
  state.table.replaceChildren(thead, body);
  root.dataset.draws = String(Number(root.dataset.draws) + 1);
  root.dataset.drawn = "true";
}

function build(root) {
  // the table's fixed parts, once: the toolbar (search, CSV) and the table; rows report clicks
  const toolbar = document.createElement("div");
  toolbar.className = "attnviz-toolbar";
  const search = document.createElement("input");
  Object.assign(search, {type: "search", placeholder: "Search", className: "attnviz-search"});
  search.setAttribute("aria-label", "Search the rows");
  const csv = document.createElement("button");
  Object.assign(csv, {type: "button", textContent: "CSV", title: "Download as CSV", className: "attnviz-csv"});
  toolbar.append(search, csv);
  const table = document.createElement("table");
  root.append(toolbar, table);
  root.__attnviz = {table, sort: null, search: "", picked: null, json: null};
  search.addEventListener("input", () => { root.__attnviz.search = search.value; draw(root); });
  csv.addEventListener("click", () => downloadCsv(root));
  const pick = (event) => {
    const row = event.target.closest("tr[data-row]");
    if (!row || !root.__attnviz.data.clicks) return;
    root.__attnviz.picked = Number(row.dataset.row);
    root.__attnvizTrigger("row", root.__attnviz.picked);
  };
  table.addEventListener("click", pick);
  table.addEventListener("keydown", (event) => { if (event.key === "Enter" && event.target.matches("tr[data-row]")) pick(event); });
}

export default function (component) {
  const {data, parentElement, setTriggerValue} = component;
  let root = parentElement.querySelector(":scope > .attnviz-table");
  if (!root) {
    root = document.createElement("div");
    root.className = "attnviz-table";
    root.dataset.testid = "attnvizTable";
    root.dataset.draws = "0";
    parentElement.appendChild(root);
    build(root);
  }
  root.__attnvizTrigger = setTriggerValue;  // the newest run's callback
  const json = JSON.stringify(data);
  if (json === root.__attnviz.json) return;
  const state = root.__attnviz;
  if (state.data && state.data.columns.length !== data.columns.length) state.sort = null;  // other columns
  Object.assign(state, {data, json, picked: null});
  draw(root);
}
