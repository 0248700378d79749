// cudamagic's JupyterLab extension: a code cell whose first line is the %%cuda cell magic is
// edited (and highlighted) as C++; every other code cell keeps the notebook's language.
//
// JupyterLab gives every code cell the notebook's language (the kernel's language_info, Python
// here) and sets it again on each kernel change; the cell's editor follows its model's mimeType,
// loading the language it names (asynchronously: the last load to finish is the one shown). So
// each code cell model is watched: on an edit, and whenever JupyterLab resets the type, a %%cuda
// cell is given C++'s (the language JupyterLab registers as text/x-c++src) once both languages
// are loaded, so that the editor's own earlier load cannot finish after it.
import { IEditorLanguageRegistry } from '@jupyterlab/codemirror';
import { INotebookTracker } from '@jupyterlab/notebook';

const CPP = 'text/x-c++src';
const MAGIC = '%%cuda';

/** The cell's first line names the %%cuda cell magic (not %%cudaX, not %cuda_load). */
export function isCudaCell(source) {
  const first = source.split('\n', 1)[0];
  return first === MAGIC || first.startsWith(MAGIC + ' ') || first.startsWith(MAGIC + '\t');
}

function follow(notebook, model, languages) {
  if (model.type !== 'code' || model.__cudamagicFollowed) {
    return;
  }
  model.__cudamagicFollowed = true;
  const update = () => {
    if (model.isDisposed) {
      return;
    }
    const cuda = isCudaCell(model.sharedModel.getSource());
    const wanted = cuda ? CPP : notebook.codeMimetype;
    if (!wanted || model.mimeType === wanted) {
      return;
    }
    const loading = [languages.getLanguage(wanted), languages.getLanguage(model.mimeType)];
    Promise.all(loading)
      .then(() => {
        const now = isCudaCell(model.sharedModel.getSource()) ? CPP : notebook.codeMimetype;
        if (!model.isDisposed && now === wanted && model.mimeType !== wanted) {
          model.mimeType = wanted;
        }
      })
      .catch(console.error);
  };
  model.contentChanged.connect(update);
  model.mimeTypeChanged.connect(update); // JupyterLab set the notebook's language again
  update();
}

function watch(notebook, languages) {
  const cells = notebook.model && notebook.model.cells;
  if (!cells) {
    return;
  }
  for (let i = 0; i < cells.length; i++) {
    follow(notebook, cells.get(i), languages);
  }
  cells.changed.connect((_, change) => {
    for (const model of change.newValues || []) {
      follow(notebook, model, languages);
    }
  });
}

const plugin = {
  id: 'cudamagic-jupyterlab:highlight',
  description: 'Highlights %%cuda cells as C++',
  autoStart: true,
  requires: [INotebookTracker, IEditorLanguageRegistry],
  activate: (app, tracker, languages) => {
    const add = panel => {
      const notebook = panel.content;
      panel.context.ready.then(() => watch(notebook, languages)).catch(console.error);
      notebook.modelChanged.connect(() => watch(notebook, languages));
    };
    tracker.forEach(add); // notebooks opened before this plugin started (a restored layout)
    tracker.widgetAdded.connect((_, panel) => add(panel));
  }
};

export default plugin;
